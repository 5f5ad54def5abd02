"""The model as the text ``model`` that ``gradlog train`` and ``gl.watch`` log when a run
starts: its repr (the modules in order) and a table of its parameters in
``named_parameters()`` order, with shapes and sizes. Users read it in TensorBoard's Text tab;
the dashboard takes its layer order from it (gradlog.dashboard.layers parses both parts)."""

from __future__ import annotations

from typing import Any

__all__ = ["MODEL_TEXT_TAG", "model_text"]

MODEL_TEXT_TAG = "model"


def model_text(model: Any) -> str:
    """Markdown: the repr in a code block, then ``| parameter | shape | elements | trainable |``
    (names in backticks) and the totals. Works for gradlog and PyTorch modules alike."""
    rows, total, trainable = [], 0, 0
    for name, p in model.named_parameters():
        n = int(p.numel())
        total += n
        trainable += n if p.requires_grad else 0
        rows.append(f"| `{name}` | {tuple(p.shape)} | {n:,} | "
                    f"{'yes' if p.requires_grad else 'no'} |")
    table = ["| parameter | shape | elements | trainable |", "|---|---|---|---|", *rows]
    return "\n".join(["```", repr(model), "```", "", *table, "",
                      f"{total:,} parameters, {trainable:,} trainable"])
