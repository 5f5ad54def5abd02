"""``repr`` of tensors in PyTorch's format: ``tensor([2., 4., 6.])``,
``tensor(12., grad_fn=<PowBackward0>)``, ``tensor([1, 2], dtype=gradlog.int32)``."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes

_THRESHOLD = 1000
_EDGE = 3
_LINEWIDTH = 80


def _float_formatter(values: np.ndarray) -> Any:
    finite = values[np.isfinite(values)]
    nonzero = np.abs(finite[finite != 0]).astype(np.float64)
    int_mode = bool(np.all(finite == np.ceil(finite))) if finite.size else True
    sci = False
    if nonzero.size:
        lo, hi = nonzero.min(), nonzero.max()
        if int_mode:
            sci = hi > 1e8
        else:
            sci = hi / lo > 1000.0 or hi > 1e8 or lo < 1e-4
    if sci:
        def fmt(v: float) -> str:
            return f"{v:.4e}"
    elif int_mode:
        def fmt(v: float) -> str:
            return f"{v:.0f}." if np.isfinite(v) else f"{v}"
    else:
        def fmt(v: float) -> str:
            return f"{v:.4f}"

    def safe(v: float) -> str:
        if np.isnan(v):
            return "nan"
        if np.isinf(v):
            return "inf" if v > 0 else "-inf"
        return fmt(v)
    return safe


def _formatter(data: np.ndarray) -> Any:
    kind = data.dtype.kind
    if kind == "f":
        return _float_formatter(data)
    if kind == "b":
        return lambda v: "True" if v else "False"
    return lambda v: str(int(v))


def _summarized(data: np.ndarray) -> np.ndarray:
    """The elements shown when the tensor is summarized (edges of each dimension)."""
    if data.ndim == 0:
        return data.reshape(1)
    if data.shape[0] > 2 * _EDGE:
        parts = [data[:_EDGE], data[-_EDGE:]]
    else:
        parts = [data]
    return np.concatenate([_summarized(p_i) for p in parts for p_i in p]) if data.ndim > 1 \
        else np.concatenate(parts)


def _rows(data: np.ndarray, fmt: Any, width: int, indent: int, summarize: bool) -> str:
    if data.ndim == 0:
        return fmt(data.item()).rjust(width)
    if data.ndim == 1:
        items = [fmt(v).rjust(width) for v in data.tolist()]
        if summarize and len(items) > 2 * _EDGE:
            items = items[:_EDGE] + ["..."] + items[-_EDGE:]
        per_line = max(1, (_LINEWIDTH - indent) // (width + 2))
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    n = data.shape[0]
    idx = list(range(n))
    if summarize and n > 2 * _EDGE:
        idx = idx[:_EDGE] + [None] + idx[-_EDGE:]
    parts = ["..." if i is None else _rows(data[i], fmt, width, indent + 1, summarize)
             for i in idx]
    sep = "," + "\n" * (data.ndim - 1) + " " * (indent + 1)
    return "[" + sep.join(parts) + "]"


def format_data(data: np.ndarray, indent: int) -> str:
    if data.size == 0:
        return "[]" if data.ndim <= 1 else "[]"
    summarize = data.size > _THRESHOLD
    shown = _summarized(data) if summarize else data.reshape(-1)
    fmt = _formatter(shown)
    width = max(len(fmt(v)) for v in shown.tolist())
    return _rows(data, fmt, width, indent, summarize)


def tensor_repr(t: Any) -> str:
    data = t._data
    prefix = "tensor("
    body = format_data(data, len(prefix))
    extras = []
    if data.size == 0 and data.ndim != 1:
        extras.append(f"size={tuple(data.shape)}")
    default = {"f": dtypes.get_default_dtype().np, "i": np.dtype(np.int64),
               "b": np.dtype(np.bool_)}.get(data.dtype.kind)
    if data.dtype != default:
        extras.append(f"dtype=gradlog.{dtypes.as_dtype(data.dtype).name}")
    if t._grad_fn is not None:
        extras.append(f"grad_fn=<{t._grad_fn.name()}>")
    elif t._requires_grad:
        extras.append("requires_grad=True")
    suffix = "".join(", " + e for e in extras)
    return f"{prefix}{body}{suffix})"
