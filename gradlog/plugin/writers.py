"""The one place runs create their TensorBoard writers (``gl.watch``'s run and rank sub-runs,
``gradlog train``'s run and its rank sub-runs): through ``SummaryWriter``'s
public constructor, imported on first use (``import gradlog`` loads no TensorBoard)."""

from __future__ import annotations

from typing import Any

__all__ = ["open_writer"]


def open_writer(log_dir: str | None = None, **options: Any) -> Any:
    """A new ``SummaryWriter(log_dir, **options)`` (``purge_step``, ``flush_secs``, ...)."""
    from ..tensorboard import SummaryWriter
    return SummaryWriter(log_dir=log_dir, **options)

