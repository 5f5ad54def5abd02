"""The model summary ``gradlog train`` prints at start, as Lightning's ``ModelSummary``: every
layer with its type, parameter count and output shape, then the trainable, non-trainable and
total parameters and their size.

Output shapes come from one forward pass of one training example (batch of one) in eval mode
without gradients, before any plugin is attached; the model's modes, its buffers and the
global random state are left exactly as they were, so the summary never changes a run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["model_summary", "human_count"]


def human_count(n: float) -> str:
    """``80``, ``1.2 K``, ``3.4 M``: Lightning's way of counting parameters."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return str(int(n))


def model_summary(model: Any, loader: Any = None, engine: Any = None) -> str:
    """The summary table of ``model``; shapes from one example of ``loader`` (if it has one).
    ``engine``: the run's (by default, the one ``engine_for(model)`` picks)."""
    if engine is None:
        from ..engines import engine_for
        engine = engine_for(model)
    shapes = _output_shapes(model, engine, _one_example(loader)) if loader is not None else {}
    rows = [("", "Name", "Type", "Params", "Out shape")]
    for i, (name, module) in enumerate(list(model.named_modules())[1:]):
        n = sum(p.numel() for p in module.parameters())
        rows.append((str(i), name, type(module).__name__, human_count(n),
                     shapes.get(id(module), "?")))
    widths = [max(len(r[c]) for r in rows) for c in range(5)]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    rule = "-" * max(len(line) for line in lines)
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    total = sum(p.numel() for p in params)
    size = sum(engine.to_numpy(p).nbytes for p in params) / 1e6
    totals = [(human_count(trainable), "Trainable params"),
              (human_count(total - trainable), "Non-trainable params"),
              (human_count(total), "Total params"),
              (f"{size:.3f}", "Total estimated model params size (MB)")]
    return "\n".join([lines[0], rule, *lines[1:], rule,
                      *(f"{a:<10}{b}" for a, b in totals)])


def _one_example(loader: Any) -> Any:
    """A batch of one: the loader's first example through its own collate function."""
    try:
        batch = loader.collate_fn([loader.dataset[0]])
    except Exception:  # noqa: BLE001  (a loader without dataset/collate_fn: no shapes)
        return None
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def _output_shapes(model: Any, engine: Any, x: Any) -> dict[int, str]:
    if x is None:
        return {}
    shapes: dict[int, str] = {}

    def record(module: Any, args: Any, output: Any) -> None:
        outputs = output if isinstance(output, (tuple, list)) else (output,)
        shapes.setdefault(id(module), ", ".join(
            str(list(o.shape)) if hasattr(o, "shape") else "?" for o in outputs))

    modules = list(model.modules())
    modes = [(m, m.training) for m in modules]
    handles = [engine.register_hook(m, "register_forward_hook", record) for m in modules]
    state = engine.random_state()
    try:
        model.eval()
        with engine.no_grad():
            model(x)
    except Exception:  # noqa: BLE001  (the summary is a courtesy: a model that needs more
        return {}      # than one example, or another input, gets no shapes)
    finally:
        for h in handles:
            h.remove()
        for m, mode in modes:
            m.training = mode
        engine.set_random_state(state)
    return shapes
