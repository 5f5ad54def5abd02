"""PyTorch behind the engine interface. torch is imported only when a run's model is a
``torch.nn.Module`` (``claims`` looks at ``sys.modules`` and never imports it)."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import numpy as np

from ..utils.hooks import hook_registries
from ..utils.run_hooks import RunHook
from .base import Collectives, Engine, Handles, map_tensors, read_only

__all__ = ["TorchEngine", "ResumableLoader", "TorchCollectives"]

# Hook registries of torch modules, tensors and optimizers.
_MODULE_REGISTRIES = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
                      "_backward_hooks")
_TENSOR_REGISTRIES = ("_backward_hooks", "_post_accumulate_grad_hooks")
_OPTIMIZER_REGISTRIES = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks")


class TorchEngine(Engine):
    name = "torch"

    @classmethod
    def claims(cls, model: Any) -> bool:
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(model, torch.nn.Module)

    @classmethod
    def seed_if_loaded(cls, seed: int) -> None:
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.manual_seed(seed)

    def __init__(self) -> None:
        import torch

        from ._torch_statistics import TorchStatistics
        self.torch = torch
        self._module_hooks = LiveHooks()  # the run's hooks on modules, not yet removed
        self._opaque_call: Any = None
        self._statistics = TorchStatistics(torch, self.is_snapshot)

    @property
    def nn(self) -> Any:
        return self.torch.nn

    @property
    def optim(self) -> Any:
        return self.torch.optim

    # -- tensors -----------------------------------------------------------------------------
    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, self.torch.Tensor)

    def to_numpy(self, value: Any) -> np.ndarray:
        if not isinstance(value, self.torch.Tensor):
            return read_only(np.asarray(value))
        t = value.detach()
        try:  # a dense CPU tensor of a numpy dtype (a logging step converts dozens of them)
            return read_only(t.numpy())
        except (TypeError, RuntimeError):  # (another layout or device, conj/neg bits, bfloat16)
            return read_only(self._converted(t))

    def _converted(self, t: Any) -> np.ndarray:
        if t.layout != self.torch.strided:
            t = t.to_dense()
        if t.is_quantized:
            t = t.dequantize()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.resolve_conj().resolve_neg()
        try:
            return t.numpy()
        except TypeError:  # bfloat16, float8: no numpy dtype; float32 holds them exactly
            return t.float().numpy()

    def from_numpy(self, array: Any, like: Any = None) -> Any:
        t = self.torch.from_numpy(np.array(array))
        if like is not None:
            t = t.to(dtype=like.dtype, device=like.device)
        return t

    # -- grad modes, autograd and library functions ----------------------------------------------
    def no_grad(self) -> Any:
        return self.torch.no_grad()

    def enable_grad(self) -> Any:
        return self.torch.enable_grad()

    def is_grad_enabled(self) -> bool:
        return self.torch.is_grad_enabled()

    def grad(self, outputs: Any, inputs: Any, **kwargs: Any) -> tuple:
        return self.torch.autograd.grad(outputs, inputs, **kwargs)

    @property
    def functional(self) -> Any:
        return self.torch.nn.functional

    def get_total_norm(self, tensors: Any, norm_type: float = 2.0, **kwargs: Any) -> Any:
        return self.torch.nn.utils.get_total_norm(tensors, norm_type, **kwargs)

    def norms(self, tensors: list, norm_type: float = 2.0) -> list[float]:
        # torch's own vectorised norm, several times faster than numpy's float64 sum here.
        # Half-precision values are summed in float32 (their squares overflow float16), other
        # layouts made dense as to_numpy does.
        torch, out = self.torch, []
        for t in tensors:
            t = t.detach()
            if t.numel() == 0:  # (no identity for the inf norm: 0, as numpy's default gives)
                out.append(0.0)
                continue
            if t.layout != torch.strided:
                t = t.to_dense()
            if not (t.is_floating_point() or t.is_complex()):
                t = t.double()
            elif t.is_floating_point() and t.element_size() < 4:
                t = t.float()
            out.append(float(torch.linalg.vector_norm(t, norm_type)))
        return out

    def all_finite(self, tensor: Any) -> bool:
        # the sum where the tensor lives (one small read), every value only if it is not finite
        t = tensor.detach()
        if not (t.is_floating_point() or t.is_complex()):
            return True
        if t.layout == self.torch.sparse_coo:  # (the stored values, never a dense copy)
            t = t.coalesce().values()
        elif t.layout != self.torch.strided:
            t = t.values()
        total = t.sum()
        if t.is_complex():
            return bool(self.torch.isfinite(total)) or bool(self.torch.isfinite(t).all())
        return math.isfinite(total.item()) or bool(self.torch.isfinite(t).all())

    def clip_grads_with_norm_(self, parameters: Any, max_norm: float, total_norm: Any,
                              **kwargs: Any) -> None:
        self.torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm, **kwargs)

    # -- random state (the CPU generator: gradlog runs torch models on the CPU) ---------------
    def initial_seed(self) -> int:
        return self.torch.initial_seed()

    def manual_seed(self, seed: int) -> None:
        self.torch.manual_seed(seed)

    def random_state(self) -> Any:
        return self.torch.get_rng_state()

    def set_random_state(self, state: Any) -> None:
        self.torch.set_rng_state(self._byte_tensor(state))

    def new_generator(self, seed: int) -> Any:
        return self.torch.Generator().manual_seed(seed)

    def set_generator_state(self, generator: Any, state: Any) -> None:
        generator.set_state(self._byte_tensor(state))

    def _byte_tensor(self, state: Any) -> Any:
        if isinstance(state, self.torch.Tensor):
            return state.detach().to(self.torch.uint8).cpu()
        return self.torch.from_numpy(np.array(self.to_numpy(state), dtype=np.uint8))

    @contextlib.contextmanager
    def use_generator(self, generator: Any) -> Iterator[Any]:
        # NOTE: torch has one default generator object; for the block it carries the
        # plugin's stream (so global draws and draws on the yielded object advance it), and
        # the plugin's generator takes the advanced state back afterwards.
        default = self.torch.default_generator
        default.set_state(generator.get_state())
        try:
            yield default
        finally:
            generator.set_state(default.get_state())

    # -- the end of a backward pass -------------------------------------------------------------
    def on_backward_end(self, parameters: list, hook: Any) -> Handles:
        # A post-accumulate-grad hook on each parameter; the first one of a backward pass
        # queues a callback that the autograd engine runs when the pass is over (after every
        # accumulation). NOTE: that callback queues itself once more, so the hook runs after
        # every callback queued during the pass -- DistributedDataParallel's, which writes the
        # averaged gradients: the hook sees what the optimizer will see, as on gradlog's engine.
        engine = self.torch.autograd.Variable._execution_engine
        queued = [False]

        def backward_end() -> None:
            queued[0] = False
            hook()

        def after_other_callbacks() -> None:
            engine.queue_callback(backward_end)

        def accumulated(param: Any) -> None:
            if not queued[0]:
                queued[0] = True
                engine.queue_callback(after_other_callbacks)

        hook_of_run = RunHook(accumulated)  # (a copy of the model gets an inert one)
        return Handles([p.register_post_accumulate_grad_hook(hook_of_run)
                        for p in parameters if p.requires_grad])

    # -- checkpoints and data ---------------------------------------------------------------------
    def to_checkpoint(self, state: Any) -> Any:
        from ..autograd.creation import from_numpy

        def convert(t: Any) -> Any:
            return from_numpy(np.array(self.to_numpy(t)))
        return map_tensors(state, self.is_tensor, convert)

    def from_checkpoint(self, state: Any) -> Any:
        from ..autograd.tensor import Tensor

        def convert(t: Any) -> Any:
            return self.torch.from_numpy(np.array(t.detach().numpy()))
        return map_tensors(state, lambda v: isinstance(v, Tensor), convert)

    def resumable_loader(self, loader: Any) -> Any:
        if isinstance(loader, self.torch.utils.data.DataLoader) and \
                not callable(getattr(loader, "state_dict", None)):
            return ResumableLoader(loader, self)
        return super().resumable_loader(loader)

    # -- several processes ----------------------------------------------------------------------
    def collectives(self) -> Collectives:
        dist = self.torch.distributed
        if dist.is_available() and dist.is_initialized():
            return TorchCollectives(self.torch)
        return Collectives()

    def local_module(self, model: Any) -> Any:
        return self._wrapped(model)[-1]

    def local_optimizer(self, optimizer: Any) -> Any:
        # NOTE: Accelerate's AcceleratedOptimizer is a torch Optimizer that never ran its
        # __init__ (no step-hook tables) and steps the optimizer it holds on real steps only
        # (not on accumulating micro-batches): that one's step hooks are the ones that fire
        inner = getattr(optimizer, "optimizer", None)
        while (isinstance(inner, self.torch.optim.Optimizer)
               and not hasattr(optimizer, "_optimizer_step_pre_hooks")):
            optimizer, inner = inner, getattr(inner, "optimizer", None)
        return optimizer

    def _wrapped(self, model: Any) -> list:
        """``model`` and the modules it wraps, outermost first: DistributedDataParallel,
        DataParallel and torch.compile's wrappers, in any order."""
        parallel = self.torch.nn.parallel
        wrappers = (parallel.DistributedDataParallel, parallel.DataParallel)
        chain = [model]
        while True:
            if isinstance(model, wrappers):
                model = model.module
            elif self._compiled(model):
                # NOTE: _orig_mod is where torch.compile keeps the user's module (its
                # documented way back to the original names and state_dict keys)
                model = model._orig_mod
            else:
                return chain
            chain.append(model)

    def register_root_hook(self, model: Any, hook: Any) -> Handles:
        chain = self._wrapped(model)
        if not any(self._compiled(m) for m in chain):
            return super().register_root_hook(model, hook)
        # NOTE: on the outermost wrapper, whose hooks run outside compiled code. Compiled
        # code ignores module hooks added or removed after it was compiled (dynamo does not
        # guard on them), so a forward during which gradlog's hooks are on the model runs
        # eagerly (torch.compiler.set_stance("force_eager")): the hooks fire, and no graph
        # is compiled with them in it.
        eager = EagerWhileHooked(self.torch, self._module_hooks)

        def root_then_enter(module: Any, args: Any) -> Any:
            # one hook: the run's (which may register the hooks of a logging step), then the
            # stance for what is registered now
            result = hook(module, args)
            eager.enter()
            return result
        return Handles([model.register_forward_pre_hook(RunHook(root_then_enter)),
                        model.register_forward_hook(RunHook(eager.exit), always_call=True)])

    def register_hook(self, owner: Any, method: str, hook: Any, **kwargs: Any) -> Any:
        handle = super().register_hook(owner, method, hook, **kwargs)
        if method in _MODULE_HOOK_METHODS:
            # counted: a compiled model's forward asks at every step whether any is registered
            return self._module_hooks.track(handle)
        return handle

    @staticmethod
    def _compiled(model: Any) -> bool:
        dynamo = sys.modules.get("torch._dynamo.eval_frame")  # (loaded by torch.compile)
        return dynamo is not None and isinstance(model, dynamo.OptimizedModule)

    def opaque(self, hook: Any) -> Any:
        # compiled code calls the hook eagerly at a graph break (on the steps it is
        # registered), instead of tracing numpy and clock calls into graphs. One disabled
        # function calls them all: torch.compiler.disable(f) costs 0.3-1 ms per call, and a
        # logging step registers several hooks (the histogram's: one per module)
        if self._opaque_call is None:
            self._opaque_call = self.torch.compiler.disable(_call)
        return functools.partial(self._opaque_call, hook)

    def graph_def(self, model: Any, input_to_model: Any = None, verbose: bool = False,
                  strict: bool = True) -> Any:
        # PyTorch's own tracer (torch.jit.trace and its conversion), as its SummaryWriter's
        from torch.utils.tensorboard._pytorch_graph import graph
        return graph(model, input_to_model, verbose, strict)[0]

    def hook_registries(self, model: Any = None, optimizer: Any = None) -> Any:
        return hook_registries(model, optimizer, attributes=(
            _MODULE_REGISTRIES, _TENSOR_REGISTRIES, _OPTIMIZER_REGISTRIES))

    # -- gradlog train on several processes (torch.distributed over gloo) ------------------
    launcher = "torchrun"

    @classmethod
    def join_job(cls) -> tuple[int, int] | None:
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or "MASTER_ADDR" not in os.environ:
            return None  # (torchrun sets both)
        try:
            import torch.distributed as dist
        except ImportError:
            raise ImportError("this is one of several torchrun processes, but torch is not "
                              "installed") from None
        dist.init_process_group("gloo")
        return dist.get_rank(), dist.get_world_size()

    @classmethod
    def job_collectives(cls) -> Collectives:
        import torch
        return TorchCollectives(torch)

    @classmethod
    def leave_job(cls, status: int) -> None:
        import torch.distributed as dist
        if status == 0:
            # NOTE: a barrier first: torch 2.13's gloo group can deadlock when destroyed
            # while its worker thread still frees an all-reduce's tensors
            dist.barrier()
        dist.destroy_process_group()

    @classmethod
    def exits_without_teardown(cls) -> bool:
        # NOTE: a rank under torch's launcher with a gloo group: torch 2.13 sometimes never
        # finishes the interpreter's teardown
        return bool(os.environ.get("TORCHELASTIC_RUN_ID")) and "torch.distributed" in sys.modules

    def data_parallel(self, model: Any) -> Any:
        return self.torch.nn.parallel.DistributedDataParallel(model)

    @classmethod
    def check_launcher(cls) -> None:
        pass  # torch's own launcher: torch is installed, since the model is a torch module

    @classmethod
    def run_ranks(cls, n: int, command: list[str], env: dict[str, str], err: TextIO,
                  notice: Callable[[str], None]) -> dict[int, str]:
        from .launchers import torchrun
        return torchrun.run_ranks(n, command, env)  # (the ranks' stderr is this process's)

    def scaler_marker(self, scaler: Any) -> Any:
        # NOTE: GradScaler.update() rewrites its scale tensor in place
        # (torch._amp_update_scale_), which bumps the tensor's version counter: read without
        # the device, where get_scale() waits for it. Before the first scale() there is no
        # tensor yet (a new one starts at version 0).
        scale = getattr(scaler, "_scale", None)
        if scale is None and hasattr(scaler, "_scale"):
            return 0
        if not isinstance(scale, self.torch.Tensor):  # (another scaler: its scale)
            return super().scaler_marker(scaler)
        return scale._version

    # -- statistics: torch ops on the tensors' devices (see _torch_statistics) ----------------
    def histogram_counts(self, tensors: list, bins: Any = "tensorflow") -> Any:
        return self._statistics.histogram_counts(tensors, bins)

    def nonfinite_counts(self, tensors: list) -> list[int]:
        return self._statistics.nonfinite_counts(tensors)

    def summaries(self, tensors: list, bounds: tuple[float, float] | None = None) -> Any:
        return self._statistics.summaries(tensors, bounds)

    def sums_of_squares(self, tensors: list, subtract: list | None = None) -> Any:
        return self._statistics.sums_of_squares(tensors, subtract)


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


_MODULE_HOOK_METHODS = frozenset({
    "register_forward_pre_hook", "register_forward_hook", "register_full_backward_pre_hook",
    "register_full_backward_hook"})


class LiveHooks:
    """The ids of a run's hooks on modules that are registered and not yet removed. Asking
    whether there are any costs nothing; walking every module's hook registries at every
    forward cost 5 us (0.3% of W7c's step)."""

    def __init__(self) -> None:
        self._ids: set[int] = set()

    def __bool__(self) -> bool:
        return bool(self._ids)

    def track(self, handle: Any) -> TrackedHandle:
        self._ids.add(handle.id)
        return TrackedHandle(handle, self._ids)


class TrackedHandle:
    """A hook handle whose ``remove()`` also takes the hook out of its ``LiveHooks``."""

    __slots__ = ("_handle", "_ids")

    def __init__(self, handle: Any, ids: set[int]) -> None:
        self._handle, self._ids = handle, ids

    @property
    def id(self) -> int:
        return self._handle.id

    def remove(self) -> None:
        self._ids.discard(self._handle.id)
        self._handle.remove()

    def __enter__(self) -> TrackedHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


class EagerWhileHooked:
    """Runs the forward passes of a compiled module eagerly while the run has a hook on one
    of its modules (``hooks``: the run's ``LiveHooks``), compiled otherwise."""

    def __init__(self, torch: Any, hooks: LiveHooks) -> None:
        self._torch, self._hooks = torch, hooks
        self._stance: Any = None

    def enter(self) -> None:
        if self._stance is None and self._hooks:
            self._stance = self._torch.compiler.set_stance("force_eager")  # (set at once)

    def exit(self, module: Any, args: Any, output: Any) -> None:
        stance, self._stance = self._stance, None
        if stance is not None:
            stance.__exit__(None, None, None)  # back to the stance before


class TorchCollectives(Collectives):
    """The run's ranks: torch.distributed's default group (gloo on the CPU)."""

    def __init__(self, torch: Any) -> None:
        self._torch, self._dist = torch, torch.distributed
        self.rank, self.world_size = self._dist.get_rank(), self._dist.get_world_size()

    def _all_reduce(self, values: np.ndarray, op: str) -> np.ndarray:
        ops = self._dist.ReduceOp
        t = self._torch.from_numpy(values.copy())
        # gloo has no AVG: the sum, divided here
        self._dist.all_reduce(t, op={"mean": ops.SUM, "sum": ops.SUM, "max": ops.MAX,
                                     "min": ops.MIN}[op])
        out = t.numpy()
        return out / self.world_size if op == "mean" else out

    def _broadcast(self, values: np.ndarray, src: int) -> np.ndarray:
        t = self._torch.from_numpy(values.copy())
        self._dist.broadcast(t, src)
        return t.numpy()

    def _all_gather(self, values: np.ndarray) -> list[np.ndarray]:
        t = self._torch.from_numpy(values.copy())
        out = [self._torch.empty_like(t) for _ in range(self.world_size)]
        self._dist.all_gather(out, t)
        return [o.numpy() for o in out]

    def barrier(self) -> None:
        self._dist.barrier()


class ResumableLoader:
    """A ``torch.utils.data.DataLoader`` with gradlog's loader state: the epoch, the batches
    of it already consumed, the random state its order was drawn from and the state of the
    loader's own generator. After ``load_state_dict``, the next ``iter()`` yields the rest of
    that epoch in the same order: the order is drawn again from the saved state, the batches
    already consumed are skipped, and the random stream is then put back where it was.

    The order comes from the loader's ``generator`` or, without one, from torch's global
    generator; a sampler with a generator of its own is not covered.
    """

    def __init__(self, loader: Any, engine: TorchEngine) -> None:
        self.loader = loader
        self._engine = engine
        self._epoch = 0
        self._batch = 0
        self._epoch_start: Any = None   # the random state this epoch's order was drawn from
        self._resume: tuple | None = None

    def __len__(self) -> int:
        return len(self.loader)

    def _stream(self) -> Any:
        return self.loader.generator

    def _get(self) -> np.ndarray:
        gen = self._stream()
        state = gen.get_state() if gen is not None else self._engine.random_state()
        return np.array(state.numpy(), dtype=np.uint8)

    def _set(self, state: np.ndarray) -> None:
        gen = self._stream()
        if gen is not None:
            self._engine.set_generator_state(gen, state)
        else:
            self._engine.set_random_state(state)

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        if resume is None:
            self._epoch_start, self._batch = self._get(), 0
            return self._batches(iter(self.loader))
        start, skip = resume
        now = self._get()
        self._set(start)
        it = iter(self.loader)
        for _ in range(skip):  # the first next() draws the sampler's seed
            next(it)
        if self._stream() is None:
            self._set(now)  # the global stream continues as the checkpoint left it
        self._epoch_start, self._batch = start, skip
        return self._batches(it)

    def _batches(self, it: Iterator[Any]) -> Iterator[Any]:
        for batch in it:
            self._batch += 1
            yield batch
        self._epoch += 1
        self._batch = 0

    def state_dict(self) -> dict:
        gen = self._stream()
        return {"epoch": self._epoch, "batch": self._batch,
                "epoch_start": self._epoch_start if self._batch else None,
                "generator": np.array(gen.get_state().numpy()) if gen is not None else None}

    def load_state_dict(self, state: dict) -> None:
        self._epoch = int(state["epoch"])
        self._batch = int(state["batch"])
        if state.get("generator") is not None:
            if self._stream() is None:
                raise ValueError("DataLoader state: the checkpoint holds a generator state but "
                                 "this loader shuffles with torch's global generator")
            self._engine.set_generator_state(self._stream(), state["generator"])
        if self._batch:
            self._resume = (np.asarray(state["epoch_start"], dtype=np.uint8), self._batch)
