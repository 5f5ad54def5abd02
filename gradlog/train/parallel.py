"""``gradlog train`` as one rank of a data-parallel job (``gradlog train --nproc N``,
``mpiexec -n N gradlog train``, or torchrun for a PyTorch ``build()``).

Every rank builds the same example and reads the same training batches (the loader's order,
and its checkpointed position, are those of one process: a run resumes on any number of
ranks); rank r trains on rows r, r+N, r+2N, ... of each global batch, in the model wrapped by
its engine's ``DistributedDataParallel``; validation sums every rank's rows. Rank 0 alone
writes the run directory (``run.toml``, events, checkpoints); stop requests are agreed by all
ranks at the end of a batch. A rank that ends with a non-zero status ends the job: MPI aborts
every rank, torch's launcher stops the others; ``--nproc`` then names the rank.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import UserError

__all__ = ["Job", "join", "RankShare", "summed", "STATUS_DIR_ENV"]

STATUS_DIR_ENV = "GRADLOG_LAUNCH_DIR"  # where --nproc's ranks leave their exit status


@dataclass
class Job:
    """This process's place in the job: ``backend`` ``"mpi"`` (gradlog models) or ``"torch"``
    (PyTorch models over gloo)."""

    backend: str
    rank: int
    world_size: int

    @property
    def collectives(self) -> Any:
        """The job's collective operations (before the Run, whose own these are, exists)."""
        if self.backend == "mpi":
            from .. import distributed
            from ..engines.gradlog import MPICollectives
            return MPICollectives(distributed.GroupMember.WORLD)
        import torch

        from ..engines.torch import TorchCollectives
        return TorchCollectives(torch)

    def check_engine(self, engine: Any, example: str) -> None:
        wanted = {"mpi": "gradlog", "torch": "torch"}[self.backend]
        if engine.name != wanted:
            how = ("gradlog train --nproc N, or mpiexec -n N gradlog train" if engine.name ==
                   "gradlog" else "gradlog train --nproc N, or torchrun")
            raise UserError(f"{example} builds a {engine.name} model, which trains on several "
                            f"processes under {how}, not under "
                            f"{'mpiexec' if self.backend == 'mpi' else 'torchrun'}")

    def check_batch(self, batch_size: int) -> None:
        if batch_size % self.world_size:
            raise UserError(f"--batch-size {batch_size} is the global batch: it must divide "
                            f"evenly across the {self.world_size} processes")

    def wrap(self, model: Any, engine: Any) -> Any:
        """``model`` in its engine's ``DistributedDataParallel`` (rank 0's weights copied to
        every rank)."""
        return engine.nn.parallel.DistributedDataParallel(model)

    def finish(self, status: int, message: str = "") -> None:
        """Leave the job: a clean exit together, or (non-zero status) the end of every rank."""
        where = os.environ.get(STATUS_DIR_ENV)
        if where:
            with open(os.path.join(where, f"rank{self.rank}.json"), "w") as f:
                json.dump({"rank": self.rank, "status": status, "message": message}, f)
        if self.backend == "mpi":
            from .. import distributed
            if status != 0:
                distributed.GroupMember.WORLD.abort(status)
            distributed.barrier()
            distributed.destroy_process_group()
        else:
            import torch.distributed as dist
            if status == 0:
                # NOTE: a barrier first: torch 2.13's gloo group can deadlock when destroyed
                # while its worker thread still frees an all-reduce's tensors
                dist.barrier()
            dist.destroy_process_group()


def join() -> Job | None:
    """Join the job this process was started in (None when it runs alone): MPI when an MPI
    launcher started it, torch.distributed (gloo) when torchrun did."""
    mpi_size = int(os.environ.get("PMI_SIZE", "1"))
    torch_size = int(os.environ.get("WORLD_SIZE", "1"))
    if mpi_size > 1:
        from .. import distributed
        if not distributed.is_available():
            raise UserError("this is one of several MPI processes, but mpi4py is not installed: "
                            "pip install 'gradlog[mpi]'")
        distributed.init_process_group("mpi")
        return Job("mpi", distributed.get_rank(), distributed.get_world_size())
    if torch_size > 1 and "MASTER_ADDR" in os.environ:
        try:
            import torch.distributed as dist
        except ImportError:
            raise UserError("this is one of several torchrun processes, but torch is not "
                            "installed") from None
        dist.init_process_group("gloo")
        return Job("torch", dist.get_rank(), dist.get_world_size())
    return None


class RankShare:
    """Rank ``rank``'s rows of each batch of ``loader`` (rows rank, rank + N, ...), with the
    whole loader's length and state (``state_dict``: the same on every rank, for any N).

    A training batch with fewer rows than ranks is refused (a rank would have none); with
    ``allow_empty`` (validation), such a rank's share is skipped."""

    def __init__(self, loader: Any, rank: int, world_size: int, *,
                 allow_empty: bool = False) -> None:
        self.loader, self.rank, self.world_size = loader, rank, world_size
        self.allow_empty = allow_empty

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Any:
        for batch in self.loader:
            parts = batch if isinstance(batch, (tuple, list)) else (batch,)
            rows = len(parts[0])
            if rows < self.world_size and not self.allow_empty:
                raise UserError(f"a training batch has {rows} row(s), fewer than the "
                                f"{self.world_size} processes: drop the last batch "
                                "(drop_last=True) or choose sizes that leave each rank a row")
            if rows <= self.rank:
                continue
            share = tuple(t[self.rank::self.world_size] for t in parts)
            yield share if isinstance(batch, (tuple, list)) else share[0]

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)


def summed(run: Any, values: list[float]) -> list[float]:
    """``values`` summed over the ranks of ``run`` (themselves in a one-process run)."""
    if run.world_size == 1:
        return values
    return [float(v) for v in run.collectives.all_reduce(np.array(values, np.float64), "sum")]
