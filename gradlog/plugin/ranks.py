"""Where a run's values go when it trains on several processes (ranks).

Every rank runs the same plugins on the same synchronised model, so by default only rank 0
writes: its writer holds the run, and a 2-process run's logdir looks like a 1-process run's.
Values that differ between ranks either are reduced across them first
(``run.log_scalar(tag, v, reduce="mean")``, a collective: every rank calls it) or go to the
rank's own sub-run ``<logdir>/rank<k>/`` (``per_rank=True``), written by every rank, where
TensorBoard shows them next to the run under the same tags.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engines.base import REDUCTIONS
from .writers import open_writer

__all__ = ["RankedWriters", "rank_run_dir", "rank_writers", "supports"]


def supports(writer: Any, capability: str) -> bool:
    """Whether ``writer`` says it has ``capability``: gradlog's ``SummaryWriter`` lists its
    extensions to PyTorch's API in ``capabilities`` (``"add_histograms"``, ...); another writer
    (PyTorch's, tensorboardX's) lists none and gets PyTorch's calls only."""
    return capability in getattr(writer, "capabilities", ())


def rank_run_dir(logdir: str, rank: int) -> str:
    """The sub-run of rank ``rank`` in the run directory ``logdir`` (a path or a URL)."""
    from .. import storage  # lazily: import gradlog loads no TensorBoard
    return storage.join(logdir, f"rank{rank}")


def rank_writers(logdir: str, **options: Any) -> Callable[[int], Any]:
    """``rank -> writer`` of the rank's sub-run ``<logdir>/rank<k>/`` (what ``Run`` takes as
    ``rank_writer``), each opened with ``options``."""
    def rank_writer(rank: int) -> Any:
        return open_writer(rank_run_dir(logdir, rank), **options)
    return rank_writer


class RankedWriters:
    """The run's writer on rank 0 (``main``), this rank's sub-run writer (``own``, made on first
    use by ``rank_writer(rank)``), and the cross-rank reductions of logged scalars."""

    def __init__(self, writer: Any, collectives: Any,
                 rank_writer: Callable[[int], Any] | None = None) -> None:
        self.collectives = collectives
        self.rank = collectives.rank
        self.world_size = collectives.world_size
        self.main = writer if self.rank == 0 else None
        if rank_writer is None and callable(getattr(writer, "get_logdir", None)):
            rank_writer = rank_writers(writer.get_logdir())
        self._make_own = rank_writer
        self._own: Any = None
        self._warned = False

    def set_main(self, writer: Any) -> None:
        self.main = writer if self.rank == 0 else None

    def own(self) -> Any:
        """This rank's sub-run writer (None, with a warning once, when the run has no
        directory to put it in)."""
        if self._own is None and self._make_own is not None:
            self._own = self._make_own(self.rank)
        if self._own is None and not self._warned:
            self._warned = True
            warnings.warn("per-rank values are not logged: this run's writer has no directory "
                          "for rank<k>/ sub-runs (pass rank_writer= to Run)", RuntimeWarning,
                          stacklevel=4)
        return self._own

    def target(self, per_rank: bool) -> Any:
        return self.own() if per_rank else self.main

    def reduce(self, value: float, op: str | None) -> float:
        """``value`` reduced across the ranks by ``op`` (None: this rank's own)."""
        if op is None:
            return value
        if op not in REDUCTIONS:
            raise ValueError(f"log_scalar: reduce must be one of {', '.join(REDUCTIONS)} or "
                             f"None, got {op!r}")
        return float(self.collectives.all_reduce(np.array([value], dtype=np.float64), op)[0])

    def errors(self) -> Any:
        """Where plugin failures are reported: the run on rank 0, the rank's sub-run on the
        others (a failure may happen on one rank only)."""
        return self.main if self.rank == 0 else self.own()

    def close_own(self) -> None:
        if self._own is not None:
            self._own.flush()
            self._own.close()
            self._own = None
