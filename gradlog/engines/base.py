"""The engine interface: what differs between the libraries a run can watch (gradlog's own
engine, PyTorch), behind one object per run (``run.engine``).

Everything else -- modules, tensors, optimizers, their hooks -- has PyTorch's names in both, so
plugins call those directly and ask the engine only for what cannot be shared: turning tensors
into numpy arrays and back, grad modes, ``grad`` and the library functions plugins use
(``functional``, ``get_total_norm``, ``norms``, ``clip_grads_with_norm_``), random state and
generators, the per-run end-of-backward signal, checkpoint state and resumable data loaders.

A new engine is one module in this package defining a subclass of ``Engine``: subclasses
register themselves, and ``gradlog.engines.engine_for(model)`` asks each one whether it
``claims`` the model.
"""

from __future__ import annotations

import contextlib
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TextIO

import numpy as np

from ..utils.once import computed_once
from ..utils.reductions import ValueSummary, all_finite, vector_norm
from ..utils.run_hooks import RunHook

if TYPE_CHECKING:  # (the writer's stack is imported only by runs that write)
    from ..tensorboard.histogram import HistogramCounts

__all__ = ["Engine", "Handles", "Collectives", "REDUCTIONS", "HOOK_METHODS", "map_tensors",
           "read_only", "computed_once"]

REDUCTIONS = ("mean", "sum", "max", "min")

# the hook registrations of tensors, modules and optimizers (PyTorch's names)
HOOK_METHODS = frozenset({
    "register_hook", "register_post_accumulate_grad_hook", "register_forward_pre_hook",
    "register_forward_hook", "register_full_backward_pre_hook", "register_full_backward_hook",
    "register_step_pre_hook", "register_step_post_hook"})


class Handles:
    """Several hook handles removed as one (``remove()`` is idempotent, as a
    ``RemovableHandle``'s)."""

    def __init__(self, handles: list) -> None:
        self._handles = list(handles)

    def remove(self) -> None:
        handles, self._handles = self._handles, []
        for h in handles:
            h.remove()

    def __len__(self) -> int:
        return len(self._handles)


def read_only(array: np.ndarray) -> np.ndarray:
    """A view of ``array`` that raises on writes (what observers get)."""
    view = array.view()
    view.flags.writeable = False
    return view


def map_tensors(obj: Any, is_tensor: Callable[[Any], bool], convert: Callable[[Any], Any]) -> Any:
    """``obj`` with every tensor replaced by ``convert(tensor)``, through dicts, lists and
    tuples (their types kept; dict subclasses such as ``OrderedDict`` become dicts)."""
    if is_tensor(obj):
        return convert(obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, is_tensor, convert) for k, v in obj.items()}
    if isinstance(obj, list):
        return [map_tensors(v, is_tensor, convert) for v in obj]
    if isinstance(obj, tuple):
        return tuple(map_tensors(v, is_tensor, convert) for v in obj)
    return obj


class Collectives:
    """The processes a run trains on, with collective operations on numpy arrays (what
    ``run.log_scalar(..., reduce=...)``, rank-aware logging and the run's agreements between
    ranks use). This base class is a run of one process: rank 0 of 1, every operation returns
    this rank's own values; each engine's process group (MPI for gradlog, torch.distributed for
    PyTorch) is a subclass. Every rank must call each operation, in the same order."""

    rank: int = 0
    world_size: int = 1

    def all_reduce(self, array: Any, op: str = "sum") -> np.ndarray:
        """``op`` (``mean``, ``sum``, ``max``, ``min``) of every rank's ``array``; ``mean`` is
        computed in float64 for integer input."""
        if op not in REDUCTIONS:
            raise ValueError(f"unknown reduction {op!r}; accepted: {', '.join(REDUCTIONS)}")
        values = np.array(array)
        if op == "mean" and values.dtype.kind != "f":
            values = values.astype(np.float64)
        return self._all_reduce(np.ascontiguousarray(values), op)

    def broadcast(self, array: Any, src: int = 0) -> np.ndarray:
        """Rank ``src``'s ``array`` (every rank passes an array of the same shape and dtype)."""
        return self._broadcast(np.ascontiguousarray(np.array(array)), src)

    def all_gather(self, array: Any) -> list[np.ndarray]:
        """Every rank's ``array`` (same shape and dtype on each), in rank order."""
        return self._all_gather(np.ascontiguousarray(np.array(array)))

    def barrier(self) -> None:
        """Return once every rank got here."""

    def broadcast_text(self, text: str, src: int = 0) -> str:
        """Rank ``src``'s ``text`` (the others pass anything, e.g. ``""``)."""
        data = np.frombuffer(text.encode(), dtype=np.uint8)
        size = int(self.broadcast(np.array([data.size], dtype=np.int64), src)[0])
        if self.rank != src:
            data = np.zeros(size, dtype=np.uint8)
        return self.broadcast(data, src).tobytes().decode()

    # one process: nothing to combine; subclasses talk to the other ranks
    def _all_reduce(self, values: np.ndarray, op: str) -> np.ndarray:
        return values

    def _broadcast(self, values: np.ndarray, src: int) -> np.ndarray:
        if src != 0:
            raise ValueError(f"src={src} is not a rank of this run (rank 0 only)")
        return values

    def _all_gather(self, values: np.ndarray) -> list[np.ndarray]:
        return [values]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} rank {self.rank} of {self.world_size}>"


class Engine(ABC):
    """One run's view of the library its model belongs to. Subclasses implement every abstract
    method (an engine that misses one fails when its module is imported, naming them);
    ``claims`` must not import the library (gradlog never imports torch unless the model is a
    torch module)."""

    name: ClassVar[str] = ""
    registered: ClassVar[list[type[Engine]]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            missing = sorted(n for n in _abstract_names(Engine)
                             if getattr(getattr(cls, n, None), "__isabstractmethod__", False))
            if missing:
                raise TypeError(f"engine {cls.name!r} ({cls.__qualname__}) does not implement "
                                f"{', '.join(missing)}")
            Engine.registered.append(cls)

    @classmethod
    @abstractmethod
    def claims(cls, model: Any) -> bool:
        """Whether ``model`` is a module of this engine."""
        raise NotImplementedError

    @classmethod
    @abstractmethod
    def seed_if_loaded(cls, seed: int) -> None:
        """Seed the library's global generator if the library is already imported (what
        ``gradlog train`` does before ``build()`` creates the model)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<engine {self.name}>"

    @property
    @abstractmethod
    def nn(self) -> Any:
        """The library's ``nn`` (``gradlog.nn`` or ``torch.nn``): layers and losses with
        PyTorch's names in both."""
        raise NotImplementedError

    @property
    @abstractmethod
    def optim(self) -> Any:
        """The library's ``optim`` (``gradlog.optim`` or ``torch.optim``)."""
        raise NotImplementedError

    # -- tensors -----------------------------------------------------------------------------
    @abstractmethod
    def is_tensor(self, value: Any) -> bool:
        raise NotImplementedError

    @abstractmethod
    def to_numpy(self, value: Any) -> np.ndarray:
        """A read-only numpy array of ``value``'s values, on the CPU, whatever its dtype and
        device (dtypes numpy lacks, such as bfloat16, become float32); numbers and arrays
        are converted too. Shares memory with the tensor where it can: copy it to keep it."""
        raise NotImplementedError

    @abstractmethod
    def from_numpy(self, array: Any, like: Any = None) -> Any:
        """A new tensor holding ``array`` (with ``like``'s dtype and device when given)."""
        raise NotImplementedError

    # -- grad modes, autograd and the library functions plugins use --------------------------
    @abstractmethod
    def no_grad(self) -> Any:
        raise NotImplementedError

    @abstractmethod
    def enable_grad(self) -> Any:
        raise NotImplementedError

    @abstractmethod
    def is_grad_enabled(self) -> bool:
        raise NotImplementedError

    @abstractmethod
    def grad(self, outputs: Any, inputs: Any, **kwargs: Any) -> tuple:
        """``autograd.grad``: gradients of ``outputs`` w.r.t. ``inputs``; no ``.grad``
        touched."""
        raise NotImplementedError

    @property
    @abstractmethod
    def functional(self) -> Any:
        """The library's ``nn.functional`` (``cross_entropy``, ``softmax``, ...)."""
        raise NotImplementedError

    @abstractmethod
    def get_total_norm(self, tensors: Any, norm_type: float = 2.0, **kwargs: Any) -> Any:
        """``nn.utils.get_total_norm``: the p-norm of all ``tensors`` together (a tensor)."""
        raise NotImplementedError

    def norms(self, tensors: list, norm_type: float = 2.0) -> list[float]:
        """The p-norm of each of ``tensors`` (``linalg.vector_norm``), as floats: what a
        monitor logs. This default reads them as numpy arrays and sums in float64; an engine
        whose library has a vectorised norm overrides it."""
        return [vector_norm(self.to_numpy(t), norm_type) for t in tensors]

    def all_finite(self, tensor: Any) -> bool:
        """Whether every value of ``tensor`` is finite (:func:`gradlog.utils.reductions.all_finite`
        on the host; an engine whose tensors live elsewhere checks them there). What a per-step
        NaN watch asks: cheaper than a norm, and exact."""
        return all_finite(self.to_numpy(tensor))

    @abstractmethod
    def clip_grads_with_norm_(self, parameters: Any, max_norm: float, total_norm: Any,
                              **kwargs: Any) -> None:
        """``nn.utils.clip_grads_with_norm_``: scale the gradients by
        ``min(1, max_norm / (total_norm + 1e-6))``."""
        raise NotImplementedError

    # -- random state and generators --------------------------------------------------------
    @abstractmethod
    def initial_seed(self) -> int:
        raise NotImplementedError

    @abstractmethod
    def manual_seed(self, seed: int) -> None:
        raise NotImplementedError

    @abstractmethod
    def random_state(self) -> Any:
        """The global random state (``get_rng_state``), restored after internal passes."""
        raise NotImplementedError

    @abstractmethod
    def set_random_state(self, state: Any) -> None:
        raise NotImplementedError

    @abstractmethod
    def new_generator(self, seed: int) -> Any:
        raise NotImplementedError

    def generator_state(self, generator: Any) -> np.ndarray:
        """The generator's state as a uint8 numpy array (for checkpoints)."""
        return np.array(self.to_numpy(generator.get_state()), dtype=np.uint8)

    @abstractmethod
    def set_generator_state(self, generator: Any, state: Any) -> None:
        raise NotImplementedError

    @abstractmethod
    def use_generator(self, generator: Any) -> contextlib.AbstractContextManager:
        """Within the block, the global random functions (dropout, ``randn``) draw from
        ``generator``'s stream; the block's value is the generator object to pass as
        ``generator=`` inside it (draws on it advance the same stream). The caller saves and
        restores the global state around the block."""
        raise NotImplementedError

    # -- the end of a backward pass -------------------------------------------------------------
    @abstractmethod
    def on_backward_end(self, parameters: list, hook: Callable[[], None]) -> Handles:
        """Call ``hook()`` once after each backward pass that accumulated a gradient into
        one of ``parameters`` (after every accumulation of that pass; not after
        ``autograd.grad``, which accumulates nothing). Returns the handles to remove."""
        raise NotImplementedError

    # -- checkpoints and data ---------------------------------------------------------------------
    @abstractmethod
    def to_checkpoint(self, state: Any) -> Any:
        """``state`` with this engine's tensors turned into what ``gl.save`` stores (the same
        ``.npz`` format for every engine; no pickle)."""
        raise NotImplementedError

    @abstractmethod
    def from_checkpoint(self, state: Any) -> Any:
        """The inverse of ``to_checkpoint`` on what ``gl.load`` returned."""
        raise NotImplementedError

    def resumable_loader(self, loader: Any) -> Any:
        """``loader`` itself when it has ``state_dict``/``load_state_dict`` (gradlog's
        DataLoader, torchdata's StatefulDataLoader), else an engine-specific wrapper that
        adds them, so ``gradlog train --resume`` continues mid-epoch in the same order."""
        if callable(getattr(loader, "state_dict", None)) and \
                callable(getattr(loader, "load_state_dict", None)):
            return loader
        raise TypeError(f"gradlog train cannot resume a {type(loader).__name__}: a training "
                        "loader needs state_dict() and load_state_dict()")

    # -- several processes ----------------------------------------------------------------------
    @abstractmethod
    def collectives(self) -> Collectives:
        """The processes this run trains on: the engine's initialized process group, or this
        process alone."""
        raise NotImplementedError

    def local_module(self, model: Any) -> Any:
        """The module a data-parallel wrapper (``DistributedDataParallel``) or a compiled
        module holds, else ``model``: plugins see the module's own names, as in a one-process
        run of the uncompiled model."""
        return model

    def local_optimizer(self, optimizer: Any) -> Any:
        """The optimizer a framework's wrapper steps (Accelerate's prepared optimizer), else
        ``optimizer``: its step hooks are where the gradients are final."""
        return optimizer

    def register_root_hook(self, model: Any, hook: Callable[..., Any]) -> Handles:
        """``hook(module, args) -> args | None`` before each forward pass of ``model`` (the
        run's batch signal): a forward pre-hook on ``local_module(model)``."""
        return Handles([self.local_module(model).register_forward_pre_hook(hook)])

    def opaque(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """``hook`` as compiled code calls it: run as it is, never traced into a graph
        (identity for an engine that compiles nothing)."""
        return hook

    # -- hooks on the model -----------------------------------------------------------------
    @abstractmethod
    def hook_registries(self, model: Any = None,
                        optimizer: Any = None) -> Iterator[tuple[Any, str, Any]]:
        """``(owner, attribute, registry)`` of each hook registry of ``model`` (modules and
        parameters) and ``optimizer``: dicts of hooks keyed by their handles' ids."""
        raise NotImplementedError

    def count_hooks(self, model: Any = None, optimizer: Any = None) -> int:
        """Hooks registered on ``model`` (modules and parameters) and ``optimizer``: the leak
        check of ``PluginHarness`` and the tests."""
        return sum(len(registry) for _, _, registry in self.hook_registries(model, optimizer))

    def hooks_not_of_a_run(self, model: Any, optimizer: Any = None) -> dict:
        """The hooks on ``model`` and ``optimizer`` that are not a run's (not ``RunHook``s:
        registered directly, not through a plugin's registrar); ``{key: hook}``, keys for
        ``remove_hooks``."""
        found = {}
        for owner, attribute, registry in self.hook_registries(model, optimizer):
            for handle_id, entry in registry.items():
                hook = self.hook_in(entry)
                if not isinstance(hook, RunHook):
                    found[(id(owner), attribute, handle_id)] = _Found(owner, hook)
        return found

    def hook_in(self, entry: Any) -> Any:
        """The hook a registry's entry holds (the entry itself, unless the engine keeps a
        record per hook)."""
        return entry

    def remove_hooks(self, found: dict) -> None:
        """Remove hooks that ``hooks_not_of_a_run`` found (those still registered), with
        their flags (``with_kwargs``, ``always_call``)."""
        for (_, attribute, handle_id), where in found.items():
            for name in (attribute, *_FLAGS.get(attribute, ())):
                registry = getattr(where.owner, name, None)
                if registry is not None:
                    registry.pop(handle_id, None)

    # -- the run's hooks and internal passes ------------------------------------------------
    # (the plugin framework and gradlog train register hooks and keep a model's training
    # state only through these; the defaults use the PyTorch-named methods the objects of
    # both engines share, and an engine whose objects differ overrides them)
    def register_hook(self, owner: Any, method: str, hook: Callable[..., Any],
                      **kwargs: Any) -> Any:
        """Register ``hook`` on ``owner`` (a tensor, module or optimizer) as its PyTorch-named
        ``method`` does (one of ``HOOK_METHODS``: ``"register_forward_hook"``,
        ``"register_step_pre_hook"``, ...), keyword flags such as ``prepend`` passed on;
        returns the handle."""
        if method not in HOOK_METHODS:
            raise ValueError(f"unknown hook registration {method!r}; the engine registers "
                             f"{', '.join(sorted(HOOK_METHODS))}")
        return getattr(owner, method)(hook, **kwargs)

    @contextlib.contextmanager
    def training_state_kept(self, model: Any) -> Iterator[None]:
        """In the block ``model`` may change: its modules' train/eval modes, its buffers
        (BatchNorm running statistics, the same objects) and every parameter's ``.grad``
        (cleared for the block) are put back afterwards."""
        modes = [(m, m.training) for m in model.modules()]
        with self.no_grad():
            buffers = [(m, name, b, b.detach().clone())
                       for m in model.modules() for name, b in m.named_buffers(recurse=False)]
        params = list(model.parameters())
        grads = [p.grad for p in params]
        for p in params:
            p.grad = None
        try:
            yield
        finally:
            for p, g in zip(params, grads):
                p.grad = g
            for m, mode in modes:
                m.training = mode
            with self.no_grad():
                for m, name, b, saved in buffers:
                    setattr(m, name, b)
                    b.copy_(saved)

    # -- gradlog train on several processes (a job of ranks) -------------------------------
    # (class methods: a rank joins its job before build() makes the model, the run's engine
    # object; each engine implements them)
    launcher: ClassVar[str] = ""  # how a user starts this engine's ranks by hand

    @classmethod
    @abstractmethod
    def join_job(cls) -> tuple[int, int] | None:
        """Join the job this process was started in by this engine's launcher (its process
        group initialised): ``(rank, world_size)``; None when it was not started as one of
        several ranks by it. ImportError, saying what to install, when the library that runs
        the job is missing."""
        raise NotImplementedError

    @classmethod
    @abstractmethod
    def job_collectives(cls) -> Collectives:
        """The joined job's collectives (what the job agrees on before a Run exists)."""
        raise NotImplementedError

    @classmethod
    @abstractmethod
    def leave_job(cls, status: int) -> None:
        """Leave the joined job: a clean exit together (``status`` 0), or the end of every
        rank (non-zero)."""
        raise NotImplementedError

    @abstractmethod
    def data_parallel(self, model: Any) -> Any:
        """``model`` in the library's ``DistributedDataParallel`` (rank 0's weights copied to
        every rank of the joined job)."""
        raise NotImplementedError

    @classmethod
    @abstractmethod
    def check_launcher(cls) -> None:
        """ImportError, saying what to install, unless this machine can start ranks of this
        engine (``run_ranks``)."""
        raise NotImplementedError

    @classmethod
    @abstractmethod
    def run_ranks(cls, n: int, command: list[str], env: dict[str, str], err: TextIO,
                  notice: Callable[[str], None]) -> dict[int, str]:
        """Start ``n`` ranks of ``command`` on this machine (``env`` added to their
        environment; SIGINT and SIGTERM received meanwhile passed on to them), relay their
        stderr to ``err`` and wait for them. Returns how each rank that did not exit cleanly
        ended, ``{rank: "signal KILL" | "status 3"}``; ``notice`` says what the launcher
        did besides (a job started again)."""
        raise NotImplementedError

    # -- loss scalers ---------------------------------------------------------------------------
    def scaler_marker(self, scaler: Any) -> Any:
        """Something of ``scaler`` (a loss scaler: ``get_scale()``, ``update()``) that changes
        whenever its ``update()`` changes the scale, compared, never interpreted. This
        default is the scale itself; an engine whose scaler can tell without reading the
        scale (which may wait for a device) overrides it."""
        return scaler.get_scale()

    # -- statistics: computed where the tensors live, only small results cross ---------------
    @abstractmethod
    def histogram_counts(self, tensors: list, bins: Any = "tensorflow"
                         ) -> Callable[[], list[HistogramCounts]]:
        """Start computing each tensor's histogram counts against ``bins`` (``"tensorflow"``:
        PyTorch's exponential edges; a bin count; increasing edges; a numpy rule), with the
        tensor's own library on its own device. Returns a function giving the
        :class:`~gradlog.tensorboard.histogram.HistogramCounts` (a few hundred numbers per
        tensor), meant to be called on the writer's thread: the tensors may change as soon
        as this returns. Counts equal numpy's bucket by bucket, whatever the dtype."""

    @abstractmethod
    def nonfinite_counts(self, tensors: list) -> list[int]:
        """How many values of each tensor are NaN or +-inf (one transfer for all of them)."""

    def snapshot(self, tensors: list) -> list:
        """Copies of ``tensors`` on their own devices (detached), for statistics taken later
        of values the step is about to change. The statistics calls read them as they are,
        without copying them again: the caller must not change them."""
        copies = [t.detach().clone() for t in tensors]
        for c in copies:
            _SNAPSHOTS[id(c)] = c
        return copies

    def is_snapshot(self, tensor: Any) -> bool:
        """Whether ``tensor`` is one of :meth:`snapshot`'s copies (which nothing changes)."""
        return _SNAPSHOTS.get(id(tensor)) is tensor

    @abstractmethod
    def summaries(self, tensors: list, bounds: tuple[float, float] | None = None
                  ) -> Callable[[], list[ValueSummary]]:
        """Start computing, where the tensors live, each tensor's
        :class:`~gradlog.utils.reductions.ValueSummary` (mean, std, fraction outside
        ``bounds``, fraction of dead units); returns a function giving them (for the writer's
        thread, or when the numbers are needed). The tensors may change once this returns."""

    @abstractmethod
    def sums_of_squares(self, tensors: list, subtract: list | None = None
                        ) -> Callable[[], list[float]]:
        """Start computing, in float64 where the tensors live, the sum of squares of each
        tensor (of ``tensor - subtract[i]`` with ``subtract``); returns a function giving the
        numbers (for the writer's thread). The tensors may change once this returns."""


    # -- the model's graph (TensorBoard's Graphs tab) --------------------------------------------
    @abstractmethod
    def graph_def(self, model: Any, input_to_model: Any = None, verbose: bool = False,
                  strict: bool = True) -> Any:
        """The ``GraphDef`` of one forward pass of ``model`` on ``input_to_model`` (a tensor
        or a tuple of them), traced by this engine's library; what ``SummaryWriter.add_graph``
        writes. ``strict`` is ``torch.jit.trace``'s (an engine without it ignores it);
        ``verbose`` prints the graph."""

    # -- the end of the process ------------------------------------------------------------------
    @classmethod
    def exits_without_teardown(cls) -> bool:
        """Whether this process, a rank of this engine's job, must end with ``os._exit``
        once everything is written and closed: the library's job can hang in the
        interpreter's teardown. Asked by ``gradlog train`` as it exits."""
        return False

# the live snapshots, by id (weak: a snapshot is forgotten when its owner drops it)
_SNAPSHOTS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class _Found(NamedTuple):
    owner: Any
    hook: Any


# a module's registries of flags, keyed by the same handle ids (the same names in PyTorch)
_FLAGS = {"_forward_pre_hooks": ("_forward_pre_hooks_with_kwargs",),
          "_forward_hooks": ("_forward_hooks_with_kwargs", "_forward_hooks_always_called")}


def _abstract_names(cls: type) -> frozenset[str]:
    return frozenset(n for n, v in vars(cls).items()
                     if getattr(v, "__isabstractmethod__", False)
                     or getattr(getattr(v, "__func__", None), "__isabstractmethod__", False)
                     or isinstance(v, property) and getattr(v.fget, "__isabstractmethod__",
                                                            False))
