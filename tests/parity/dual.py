"""Run one program in gradlog and in PyTorch and compare what it observed.

A program is ``program(L, log)``: ``L`` is the library module (``gradlog`` or ``torch``) and
``log`` a list it appends observations to (tensors, numbers, strings, tuples of them, or
:func:`raised` records). Tensors are compared by dtype, shape and values (rounded), errors by
type and message prefix, with "torch." read as "gradlog.".
"""

from __future__ import annotations

from typing import Any

import numpy as np

import gradlog as gl


class Raised:
    """An exception observed by a program: its type name and its message up to ``n``
    characters. Two records match when the types are equal and the messages are, or when one
    message extends the other (gradlog may add the values at hand after PyTorch's text)."""

    def __init__(self, exc: BaseException, n: int) -> None:
        self.type = type(exc).__name__
        self.message = str(exc).replace("torch.", "gradlog.")[:n]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Raised) or self.type != other.type:
            return False
        short, long = sorted((self.message, other.message), key=len)
        return short == long or (len(short) >= 30 and long.startswith(short))

    def __repr__(self) -> str:
        return f"Raised({self.type}: {self.message!r})"


def raised(fn: Any, n: int = 1000) -> Raised | str:
    """Call ``fn()`` and record the exception it raises ("no error" if none)."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - recorded and compared
        return Raised(exc, n)
    return "no error"


def _is_tensor(v: Any) -> bool:
    if isinstance(v, gl.Tensor):
        return True
    torch = _torch()
    return torch is not None and isinstance(v, torch.Tensor)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def normalize(v: Any) -> Any:
    if _is_tensor(v):
        arr = v.detach().numpy()
        values = arr.tolist()
        if arr.dtype.kind == "f":  # rounded; NaN as a string so that equal logs compare equal
            rounded = np.asarray(np.round(arr.astype(np.float64), 5)).astype(object)
            rounded[np.isnan(arr)] = "nan"
            values = rounded.tolist()
        return ("tensor", str(v.dtype).split(".")[-1], tuple(v.shape), values)
    if isinstance(v, (list, tuple)):
        return tuple(normalize(x) for x in v)
    if isinstance(v, dict):
        return {k: normalize(x) for k, x in v.items()}
    if isinstance(v, float):
        return round(v, 5)
    return v


def observe(program: Any, L: Any) -> list:
    log: list = []
    program(L, log)
    return [normalize(v) for v in log]


def assert_same(program: Any) -> list:
    """Run ``program`` in both libraries; assert equal logs; return gradlog's log."""
    torch = _torch()
    ours = observe(program, gl)
    theirs = observe(program, torch)
    assert ours == theirs, f"\ngradlog: {ours}\ntorch:   {theirs}"
    return ours
