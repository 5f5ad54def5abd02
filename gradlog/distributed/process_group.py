"""The MPI process group: collective operations on numpy arrays over ``mpi4py``, each
non-blocking (``Iallreduce``, ``Ibcast``, ``Iallgather``) and returning a ``Work`` handle.

This is the one place gradlog talks to MPI. The functional API (``all_reduce`` & co. on
tensors, in ``collectives.py``) and ``DistributedDataParallel``'s gradient buckets both use it.
mpi4py is imported only when a group is created (``init_process_group``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ReduceOp", "Work", "ProcessGroupMPI", "reduce_op"]


class ReduceOp(enum.Enum):
    """How ``all_reduce`` combines the ranks' values (``torch.distributed.ReduceOp``)."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"

    def __repr__(self) -> str:
        return f"<ReduceOp.{self.name}>"


def reduce_op(op: Any) -> ReduceOp:
    """``op`` as a ``ReduceOp`` (a ``ReduceOp`` or its name, e.g. ``"max"``)."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str) and op.upper() in ReduceOp.__members__:
        return ReduceOp[op.upper()]
    raise ValueError(f"unknown reduce op {op!r}; accepted: "
                     f"{', '.join('ReduceOp.' + n for n in ReduceOp.__members__)}")


class Work:
    """A collective in flight (``torch.distributed.Work``): ``wait()`` blocks until it is done
    on this rank, then runs what must follow it (copying a result into a tensor) once."""

    def __init__(self, request: Any, then: Callable[[], None] | None = None) -> None:
        self._request = request
        self._then = then
        self._done = False

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            if self._then is not None:
                self._then()

    def wait(self, timeout: Any = None) -> bool:
        if timeout is not None:
            raise ValueError("Work.wait(timeout=...) is not supported by the MPI backend")
        if not self._done:
            self._request.Wait()
            self._finish()
        return True

    def is_completed(self) -> bool:
        """Whether the collective is done (polling it also lets MPI make progress)."""
        if not self._done and self._request.Test():
            self._finish()
        return self._done


def _check_array(array: np.ndarray, what: str) -> None:
    if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
        raise TypeError(f"{what}: expected a C-contiguous numpy array, got "
                        f"{type(array).__name__}")


class ProcessGroupMPI:
    """Every process of an MPI job (``MPI.COMM_WORLD``), or a duplicate of a given
    communicator: collectives of one group never match another's."""

    backend = "mpi"

    def __init__(self, comm: Any = None) -> None:
        from mpi4py import MPI
        self._mpi = MPI
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self._ops = {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD,
                     ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX}

    def rank(self) -> int:
        return self.comm.Get_rank()

    def size(self) -> int:
        return self.comm.Get_size()

    def allreduce(self, array: np.ndarray, op: ReduceOp = ReduceOp.SUM,
                  then: Callable[[], None] | None = None) -> Work:
        """Reduce ``array`` in place across the ranks (``AVG``: the sum divided by the number
        of ranks, for floating-point arrays)."""
        _check_array(array, "allreduce")
        if op is ReduceOp.AVG and array.dtype.kind != "f":
            raise ValueError(f"ReduceOp.AVG needs a floating-point tensor, got {array.dtype}")
        request = self.comm.Iallreduce(self._mpi.IN_PLACE, array, op=self._ops[op])
        if op is ReduceOp.AVG:
            size, after = self.size(), then

            def average() -> None:
                np.divide(array, size, out=array)
                if after is not None:
                    after()
            then = average
        return Work(request, then)

    def broadcast(self, array: np.ndarray, src: int,
                  then: Callable[[], None] | None = None) -> Work:
        """Overwrite ``array`` with rank ``src``'s."""
        _check_array(array, "broadcast")
        self._check_rank(src, "src")
        return Work(self.comm.Ibcast(array, root=src), then)

    def allgather(self, array: np.ndarray, out: np.ndarray,
                  then: Callable[[], None] | None = None) -> Work:
        """Fill ``out`` (shape ``(world_size, *array.shape)``) with every rank's ``array``."""
        _check_array(array, "allgather")
        _check_array(out, "allgather")
        return Work(self.comm.Iallgather(array, out), then)

    def barrier(self) -> Work:
        return Work(self.comm.Ibarrier())

    def abort(self, errorcode: int = 1) -> None:
        """End every process of the job now (``MPI_Abort``)."""
        self.comm.Abort(errorcode)

    def free(self) -> None:
        self.comm.Free()

    def _check_rank(self, rank: int, what: str) -> None:
        size = self.size()
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
            raise ValueError(f"{what}={rank!r} is not a rank of this group (ranks 0 to "
                             f"{size - 1})")
