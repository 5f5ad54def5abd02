"""The one place runs create their TensorBoard writers (``gl.watch``'s run and rank sub-runs,
``gradlog train``'s run and its rank sub-runs): through ``SummaryWriter``'s
public constructor, imported on first use (``import gradlog`` loads no TensorBoard)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .ranks import rank_run_dir

__all__ = ["open_writer", "rank_writers"]


def open_writer(log_dir: str | None = None, **options: Any) -> Any:
    """A new ``SummaryWriter(log_dir, **options)`` (``purge_step``, ``flush_secs``, ...)."""
    from ..tensorboard import SummaryWriter
    return SummaryWriter(log_dir=log_dir, **options)


def rank_writers(logdir: str, **options: Any) -> Callable[[int], Any]:
    """``rank -> writer`` of the rank's sub-run ``<logdir>/rank<k>/`` (what ``Run`` takes as
    ``rank_writer``), each opened with ``options``."""
    def rank_writer(rank: int) -> Any:
        return open_writer(rank_run_dir(logdir, rank), **options)
    return rank_writer
