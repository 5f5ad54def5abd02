"""``torch.distributed``'s functional API over MPI: the default process group and the
collectives on gradlog tensors (in place, as PyTorch's; ``async_op=True`` returns the
``Work``)."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from . import failure
from .process_group import ProcessGroupMPI, ReduceOp, Work, reduce_op

__all__ = ["init_process_group", "destroy_process_group", "is_initialized", "is_available",
           "is_mpi_available", "get_rank", "get_world_size", "get_backend", "all_reduce",
           "broadcast", "all_gather", "barrier", "GroupMember", "default_group"]

_NOT_INITIALIZED = ("Default process group has not been initialized, please make sure to call "
                    "init_process_group.")


class GroupMember:
    """``GroupMember.WORLD``: the default group once ``init_process_group`` ran (else None)."""

    WORLD: ProcessGroupMPI | None = None


def is_available() -> bool:
    """Whether the MPI backend can be used (``mpi4py`` is installed: ``gradlog[mpi]``)."""
    return importlib.util.find_spec("mpi4py") is not None


is_mpi_available = is_available


def is_initialized() -> bool:
    return GroupMember.WORLD is not None


def default_group(group: Any = None) -> ProcessGroupMPI:
    """``group`` itself, or the default group (``group=None``); raises if there is none."""
    if group is not None:
        if not isinstance(group, ProcessGroupMPI):
            raise TypeError(f"group must be a process group of gradlog.distributed, got "
                            f"{type(group).__name__}")
        return group
    if GroupMember.WORLD is None:
        raise ValueError(_NOT_INITIALIZED)
    return GroupMember.WORLD


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout: Any = None, world_size: int = -1, rank: int = -1,
                       store: Any = None, group_name: str = "", pg_options: Any = None,
                       device_id: Any = None) -> None:
    """Join the job's processes into the default group, as ``torch.distributed`` does.

    The only backend is ``"mpi"`` (the default): the processes are those ``mpiexec -n N``
    started (one process alone is a job of one), and ``rank``/``world_size`` come from MPI;
    given explicitly, they must agree with it. From here on, an uncaught exception on any rank
    ends every rank (``MPI_Abort``, exit code 1) after naming the failing rank, so no rank is
    left waiting in a collective.
    """
    if GroupMember.WORLD is not None:
        raise ValueError("trying to initialize the default process group twice!")
    if backend not in (None, "mpi"):
        raise ValueError(f"gradlog.distributed supports backend='mpi' only, got {backend!r} "
                         "(PyTorch models train over torch.distributed, e.g. with 'gloo')")
    for name, value in (("init_method", init_method), ("timeout", timeout), ("store", store),
                        ("pg_options", pg_options), ("device_id", device_id)):
        if value is not None:
            raise ValueError(f"init_process_group: {name} is not supported by the MPI backend "
                             f"(got {value!r}): mpiexec starts and connects the processes")
    if not is_available():
        raise RuntimeError("the MPI backend needs mpi4py and an MPI library: "
                           "pip install 'gradlog[mpi]'")
    group = ProcessGroupMPI()
    for name, given, actual in (("world_size", world_size, group.size()),
                                ("rank", rank, group.rank())):
        if given != -1 and given != actual:
            group.free()
            raise ValueError(f"init_process_group: {name}={given} but MPI says {actual} "
                             "(leave it at -1 to take MPI's)")
    GroupMember.WORLD = group
    failure.install(group)


def destroy_process_group(group: Any = None) -> None:
    """Leave the default group (the MPI library stays initialised until the process ends)."""
    pg = default_group(group)
    if pg is GroupMember.WORLD:
        failure.uninstall()
        GroupMember.WORLD = None
    pg.free()


def get_rank(group: Any = None) -> int:
    return default_group(group).rank()


def get_world_size(group: Any = None) -> int:
    return default_group(group).size()


def get_backend(group: Any = None) -> str:
    return default_group(group).backend


# -- collectives on tensors ---------------------------------------------------------------------
def _buffer(tensor: Any, what: str) -> np.ndarray:
    """A contiguous copy of ``tensor``'s values that MPI reads and writes."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{what}: expected a gradlog Tensor, got {type(tensor).__name__}")
    return np.ascontiguousarray(tensor.detach().numpy()).copy()


def _write_back(tensor: Tensor, values: np.ndarray) -> Any:
    def then() -> None:
        with no_grad():
            tensor.copy_(values)
    return then


def _finish(work: Work, async_op: bool) -> Work | None:
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(tensor: Tensor, op: Any = ReduceOp.SUM, group: Any = None,
               async_op: bool = False) -> Work | None:
    """Reduce ``tensor`` across every rank, in place (``ReduceOp.SUM``, ``AVG``, ``MAX``,
    ``MIN``, ``PRODUCT``)."""
    pg = default_group(group)
    values = _buffer(tensor, "all_reduce")
    work = pg.allreduce(values, reduce_op(op), then=_write_back(tensor, values))
    return _finish(work, async_op)


def broadcast(tensor: Tensor, src: int = 0, group: Any = None,
              async_op: bool = False) -> Work | None:
    """Overwrite ``tensor`` on every rank with rank ``src``'s, in place."""
    pg = default_group(group)
    values = _buffer(tensor, "broadcast")
    work = pg.broadcast(values, src, then=_write_back(tensor, values))
    return _finish(work, async_op)


def all_gather(tensor_list: list, tensor: Tensor, group: Any = None,
               async_op: bool = False) -> Work | None:
    """Fill ``tensor_list[k]`` with rank k's ``tensor``, on every rank."""
    pg = default_group(group)
    size = pg.size()
    values = _buffer(tensor, "all_gather")
    if not isinstance(tensor_list, list) or len(tensor_list) != size:
        got = len(tensor_list) if isinstance(tensor_list, list) else type(tensor_list).__name__
        raise ValueError(f"all_gather: tensor_list must be a list of {size} tensors (one per "
                         f"rank), got {got}")
    for k, t in enumerate(tensor_list):
        if not isinstance(t, Tensor) or tuple(t.shape) != values.shape:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"all_gather: tensor_list[{k}] must have the input's shape "
                             f"{values.shape}, got {shape}")
    out = np.empty((size, *values.shape), dtype=values.dtype)

    def then() -> None:
        with no_grad():
            for k, t in enumerate(tensor_list):
                t.copy_(out[k])
    work = pg.allgather(values, out, then=then)
    return _finish(work, async_op)


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None) -> Work | None:
    """Wait until every rank reached this point."""
    return _finish(default_group(group).barrier(), async_op)
