"""``repr`` of tensors in PyTorch's format: ``tensor([2., 4., 6.])``,
``tensor(12., grad_fn=<PowBackward0>)``, ``tensor([1, 2], dtype=gradlog.int32)``.

The algorithm is PyTorch's (``torch/_tensor_str.py`` with default print options): one formatter
for the whole tensor (integer, fixed or scientific notation, chosen from the shown values), 80
columns, 4 digits, tensors of more than 1000 elements summarized to 3 items per edge.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes

_THRESHOLD = 1000
_EDGE = 3
_LINEWIDTH = 80
_PRECISION = 4


class _Formatter:
    """Formats every element of one tensor to a common width, as PyTorch's ``_Formatter``."""

    def __init__(self, values: np.ndarray) -> None:
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = values.reshape(-1)
        if not self.floating:
            for v in flat.tolist():
                self.max_width = max(self.max_width, len(str(v)))
            return
        flat = flat.astype(np.float64)
        finite = flat[np.isfinite(flat) & (flat != 0)]
        if not finite.size:
            return
        lo, hi = np.abs(finite).min(), np.abs(finite).max()
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        if self.int_mode:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8
        else:
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        for v in finite.tolist():
            if self.sci_mode:
                width = len(f"{v:.{_PRECISION}e}")
            elif self.int_mode:
                width = len(f"{v:.0f}") + 1
            else:
                width = len(f"{v:.{_PRECISION}f}")
            self.max_width = max(self.max_width, width)

    def format(self, v: Any) -> str:
        if not self.floating:
            text = str(v)
        elif self.sci_mode:
            text = f"{v:{self.max_width}.{_PRECISION}e}"
        elif self.int_mode:
            text = f"{v:.0f}" + ("" if v != v or v in (float("inf"), float("-inf")) else ".")
        else:
            text = f"{v:.{_PRECISION}f}"
        return text.rjust(self.max_width)


def _summarized(data: np.ndarray) -> np.ndarray:
    """The elements shown when the tensor is summarized (3 at each edge of every dimension)."""
    if data.ndim == 0:
        return data
    if data.ndim == 1:
        return np.concatenate([data[:_EDGE], data[-_EDGE:]]) if len(data) > 2 * _EDGE else data
    rows = list(range(_EDGE)) + list(range(len(data) - _EDGE, len(data))) \
        if len(data) > 2 * _EDGE else range(len(data))
    return np.stack([_summarized(data[i]) for i in rows])


def _vector(data: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    per_line = max(1, (_LINEWIDTH - indent) // (fmt.max_width + 2))
    if summarize and len(data) > 2 * _EDGE:
        items = ([fmt.format(v) for v in data[:_EDGE].tolist()] + [" ..."]
                 + [fmt.format(v) for v in data[-_EDGE:].tolist()])
    else:
        items = [fmt.format(v) for v in data.tolist()]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _body(data: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    if data.ndim == 0:
        return fmt.format(data.item())
    if data.ndim == 1:
        return _vector(data, indent, summarize, fmt)
    n = len(data)
    if summarize and n > 2 * _EDGE:
        rows = ([_body(data[i], indent + 1, summarize, fmt) for i in range(_EDGE)] + ["..."]
                + [_body(data[i], indent + 1, summarize, fmt) for i in range(n - _EDGE, n)])
    else:
        rows = [_body(data[i], indent + 1, summarize, fmt) for i in range(n)]
    return "[" + ("," + "\n" * (data.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def format_data(data: np.ndarray, indent: int) -> str:
    """The bracketed values of ``data`` as PyTorch prints them, continuation lines indented."""
    if data.size == 0:
        return "[]"
    if data.dtype == np.float16:
        data = data.astype(np.float32)
    summarize = data.size > _THRESHOLD
    fmt = _Formatter(_summarized(data) if summarize else data)
    return _body(data, indent, summarize, fmt)


def _with_suffixes(text: str, suffixes: list, indent: int) -> str:
    """Append ``, suffix`` items, moving one to a new line when it would pass 80 columns."""
    parts = [text]
    last_line = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line + len(suffix) + 2 > _LINEWIDTH:
            parts.append(",\n" + " " * indent + suffix)
            last_line = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line += len(suffix) + 2
    return "".join(parts) + ")"


def tensor_repr(t: Any) -> str:
    data = t._data
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    default = dtypes.get_default_dtype().np
    if data.size == 0:
        if data.ndim != 1:
            suffixes.append(f"size={tuple(data.shape)}")
        if data.dtype != default:  # nothing to infer the dtype from: always shown
            suffixes.append(f"dtype=gradlog.{dtypes.as_dtype(data.dtype).name}")
    elif data.dtype not in (default, np.dtype(np.int64), np.dtype(np.bool_)):
        suffixes.append(f"dtype=gradlog.{dtypes.as_dtype(data.dtype).name}")
    if t._grad_fn is not None:
        suffixes.append(f"grad_fn=<{t._grad_fn.name()}>")
    elif t._requires_grad:
        suffixes.append("requires_grad=True")
    return _with_suffixes(prefix + format_data(data, indent), suffixes, indent)
