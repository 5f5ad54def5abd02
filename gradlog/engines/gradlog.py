"""gradlog's own engine behind the engine interface."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from .. import autograd
from ..autograd import random as _random
from ..autograd.creation import from_numpy as _from_numpy
from ..autograd.tensor import Tensor
from ..tensorboard.histogram import check_arguments, histogram_counts
from ..utils.reductions import all_finite, sum_of_squares, value_summary
from ..utils.run_hooks import RunHook
from .base import Collectives, Engine, Handles, computed_once, read_only

__all__ = ["GradlogEngine", "MPICollectives"]

_OPS = {"mean": "avg", "sum": "sum", "max": "max", "min": "min"}


class MPICollectives(Collectives):
    """The run's ranks: ``gradlog.distributed``'s default group (MPI)."""

    def __init__(self, group: Any) -> None:
        self._group = group
        self.rank, self.world_size = group.rank(), group.size()

    def _all_reduce(self, values: np.ndarray, op: str) -> np.ndarray:
        from ..distributed.process_group import reduce_op
        out = values.copy()
        self._group.allreduce(out, reduce_op(_OPS[op])).wait()
        return out

    def _broadcast(self, values: np.ndarray, src: int) -> np.ndarray:
        out = values.copy()
        self._group.broadcast(out, src).wait()
        return out

    def _all_gather(self, values: np.ndarray) -> list[np.ndarray]:
        out = np.empty((self.world_size, *values.shape), dtype=values.dtype)
        self._group.allgather(values, out).wait()
        return list(out)

    def barrier(self) -> None:
        self._group.barrier().wait()


class GradlogEngine(Engine):
    name = "gradlog"

    @classmethod
    def claims(cls, model: Any) -> bool:
        from ..nn import Module
        return isinstance(model, Module)

    @classmethod
    def seed_if_loaded(cls, seed: int) -> None:
        _random.manual_seed(seed)

    @property
    def nn(self) -> Any:
        from .. import nn
        return nn

    @property
    def optim(self) -> Any:
        from .. import optim
        return optim

    # -- tensors -----------------------------------------------------------------------------
    def is_tensor(self, value: Any) -> bool:
        return isinstance(value, Tensor)

    def to_numpy(self, value: Any) -> np.ndarray:
        if isinstance(value, Tensor):
            return read_only(value.detach().numpy())
        return read_only(np.asarray(value))

    def from_numpy(self, array: Any, like: Any = None) -> Tensor:
        if like is not None:
            return _from_numpy(np.array(array, dtype=like.detach().numpy().dtype))
        return _from_numpy(np.array(array))

    # -- grad modes, autograd and library functions ----------------------------------------------
    def no_grad(self) -> Any:
        return autograd.no_grad()

    def enable_grad(self) -> Any:
        return autograd.enable_grad()

    def is_grad_enabled(self) -> bool:
        return autograd.is_grad_enabled()

    def grad(self, outputs: Any, inputs: Any, **kwargs: Any) -> tuple:
        return autograd.grad(outputs, inputs, **kwargs)

    @property
    def functional(self) -> Any:
        from ..nn import functional
        return functional

    def get_total_norm(self, tensors: Any, norm_type: float = 2.0, **kwargs: Any) -> Any:
        from ..nn.utils import get_total_norm
        return get_total_norm(tensors, norm_type, **kwargs)

    def clip_grads_with_norm_(self, parameters: Any, max_norm: float, total_norm: Any,
                              **kwargs: Any) -> None:
        from ..nn.utils import clip_grads_with_norm_
        clip_grads_with_norm_(parameters, max_norm, total_norm, **kwargs)

    # -- random state -----------------------------------------------------------------------------
    def initial_seed(self) -> int:
        return _random.initial_seed()

    def manual_seed(self, seed: int) -> None:
        _random.manual_seed(seed)

    def random_state(self) -> Any:
        return _random.get_rng_state()

    def set_random_state(self, state: Any) -> None:
        _random.set_rng_state(state)

    def new_generator(self, seed: int) -> Any:
        return _random.Generator().manual_seed(seed)

    def set_generator_state(self, generator: Any, state: Any) -> None:
        generator.set_state(np.asarray(self.to_numpy(state), dtype=np.uint8))

    def use_generator(self, generator: Any) -> Any:
        # NOTE: the default generator draws from the plugin's own numpy stream in the block,
        # so draws on the generator object and global draws advance one stream.
        return _random.default_generator_as(generator)

    # -- the end of a backward pass -------------------------------------------------------------
    def on_backward_end(self, parameters: list, hook: Any) -> Handles:
        # Post-accumulate hooks mark a pass that reached these parameters; the engine's
        # end-of-backward signal (after every accumulation) then calls the hook once.
        touched = [False]

        def accumulated(param: Any) -> None:
            touched[0] = True

        def backward_end() -> None:
            if touched[0]:
                touched[0] = False
                hook()

        hook_of_run = RunHook(accumulated)  # (a copy of the model gets an inert one)
        handles = [p.register_post_accumulate_grad_hook(hook_of_run)
                   for p in parameters if p.requires_grad]
        handles.append(autograd.register_backward_end_hook(backward_end))
        return Handles(handles)

    # -- checkpoints and data ---------------------------------------------------------------------
    def to_checkpoint(self, state: Any) -> Any:
        return state  # gl.save stores gradlog tensors as they are

    def from_checkpoint(self, state: Any) -> Any:
        return state

    # -- several processes ----------------------------------------------------------------------
    def collectives(self) -> Collectives:
        from .. import distributed
        if distributed.is_initialized():
            return MPICollectives(distributed.GroupMember.WORLD)
        return Collectives()

    def local_module(self, model: Any) -> Any:
        from ..nn.parallel import DistributedDataParallel
        return model.module if isinstance(model, DistributedDataParallel) else model

    def graph_def(self, model: Any, input_to_model: Any = None, verbose: bool = False,
                  strict: bool = True) -> Any:
        from ..tensorboard.graph import autograd_graph_def  # (its autograd graph, walked)
        return autograd_graph_def(model, input_to_model, verbose)

    def hook_registries(self, model: Any = None, optimizer: Any = None) -> Any:
        from ..utils.hooks import hook_registries
        return hook_registries(model, optimizer)

    def hook_in(self, entry: Any) -> Any:
        from ..nn.modules.hooks import ForwardHook, ForwardPreHook
        # (a forward or forward pre-hook's entry is a record of the hook and its flags)
        return entry.fn if isinstance(entry, (ForwardPreHook, ForwardHook)) else entry

    # -- gradlog train on several processes (MPI) ------------------------------------------
    launcher = "mpiexec -n N gradlog train"

    @classmethod
    def join_job(cls) -> tuple[int, int] | None:
        if int(os.environ.get("PMI_SIZE", "1")) <= 1:  # (set by an MPI process manager)
            return None
        from .. import distributed
        if not distributed.is_available():
            raise ImportError("this is one of several MPI processes, but mpi4py is not "
                              "installed: pip install 'gradlog[mpi]'")
        distributed.init_process_group("mpi")
        return distributed.get_rank(), distributed.get_world_size()

    @classmethod
    def job_collectives(cls) -> Collectives:
        from .. import distributed
        return MPICollectives(distributed.GroupMember.WORLD)

    @classmethod
    def leave_job(cls, status: int) -> None:
        from .. import distributed
        if status != 0:
            distributed.GroupMember.WORLD.abort(status)
        distributed.barrier()
        distributed.destroy_process_group()

    def data_parallel(self, model: Any) -> Any:
        from ..nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model)

    @classmethod
    def check_launcher(cls) -> None:
        from .launchers import mpi
        mpi.check()

    @classmethod
    def run_ranks(cls, n: int, command: list[str], env: dict[str, str], err: TextIO,
                  notice: Callable[[str], None]) -> dict[int, str]:
        from .launchers import mpi
        return mpi.run_ranks(n, command, env, err, notice)

    # -- statistics: numpy, on the writer's thread, from snapshots taken now -------------------
    def histogram_counts(self, tensors: list, bins: Any = "tensorflow") -> Any:
        # NOTE: the values live in host memory already; the snapshot is what lets the step
        # go on changing them while the writer's thread counts (as a device snapshot does).
        # (the copies made here are read by nothing else: the counting sorts them in place)
        snapshots = [(self._kept(t), not self.is_snapshot(t)) for t in tensors]
        for a, _ in snapshots:
            check_arguments(a, bins)
        return computed_once(lambda: [histogram_counts(a, bins, scratch=own)
                                      for a, own in snapshots])

    def nonfinite_counts(self, tensors: list) -> list[int]:
        # (a dot product tells most arrays apart at once: all finite, nothing to count)
        return [0 if a.dtype.kind not in "fc" or all_finite(a) else
                int(a.size - np.count_nonzero(np.isfinite(a)))
                for a in (self.to_numpy(t) for t in tensors)]

    def summaries(self, tensors: list, bounds: tuple[float, float] | None = None) -> Any:
        arrays = [self._kept(t) for t in tensors]  # (snapshots, as above)
        return lambda: [value_summary(a, bounds) for a in arrays]

    def _kept(self, t: Any) -> np.ndarray:
        """``t``'s values as they are now: a copy, unless ``t`` is a snapshot already."""
        return self.to_numpy(t) if self.is_snapshot(t) else np.array(self.to_numpy(t))

    def sums_of_squares(self, tensors: list, subtract: list | None = None) -> Any:
        # (snapshots: the step may change the tensors; the exact float64 differences and the
        # sums are the writer's thread's work)
        arrays = [self._kept(t) for t in tensors]
        others = [self._kept(t) for t in subtract or ()]
        if not others:
            return lambda: [sum_of_squares(a) for a in arrays]
        return lambda: [sum_of_squares(a, b) for a, b in zip(arrays, others)]
