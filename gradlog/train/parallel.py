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

from ..engines import Engine, engine_classes
from .errors import UserError

__all__ = ["Job", "join", "RankShare", "summed", "STATUS_DIR_ENV"]

STATUS_DIR_ENV = "GRADLOG_LAUNCH_DIR"  # where --nproc's ranks leave their exit status


@dataclass
class Job:
    """This process's place in the job, and the engine whose launcher started it (MPI for
    gradlog models, torch.distributed over gloo for PyTorch models)."""

    engine: type[Engine]
    rank: int
    world_size: int

    @property
    def collectives(self) -> Any:
        """The job's collective operations (before the Run, whose own these are, exists)."""
        return self.engine.job_collectives()

    def check_engine(self, engine: Engine, example: str) -> None:
        if engine.name != self.engine.name:
            raise UserError(f"{example} builds a {engine.name} model, which trains on several "
                            f"processes under gradlog train --nproc N, or {engine.launcher}, "
                            f"not under {self.engine.launcher.split()[0]}")

    def check_batch(self, batch_size: int) -> None:
        if batch_size % self.world_size:
            raise UserError(f"--batch-size {batch_size} is the global batch: it must divide "
                            f"evenly across the {self.world_size} processes")

    def wrap(self, model: Any, engine: Engine) -> Any:
        """``model`` in its engine's ``DistributedDataParallel`` (rank 0's weights copied to
        every rank)."""
        return engine.data_parallel(model)

    def finish(self, status: int, message: str = "") -> None:
        """Leave the job: a clean exit together, or (non-zero status) the end of every rank."""
        where = os.environ.get(STATUS_DIR_ENV)
        if where:
            with open(os.path.join(where, f"rank{self.rank}.json"), "w") as f:
                json.dump({"rank": self.rank, "status": status, "message": message}, f)
        self.engine.leave_job(status)


def join() -> Job | None:
    """Join the job this process was started in (None when it runs alone): each engine is
    asked whether its launcher started this process (MPI's, torchrun)."""
    for engine in engine_classes():
        try:
            place = engine.join_job()
        except ImportError as exc:  # (what to install)
            raise UserError(str(exc)) from None
        if place is not None:
            return Job(engine, *place)
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
