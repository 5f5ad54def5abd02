"""gradlog's dtypes: named like PyTorch's, each backed by a numpy dtype."""

from __future__ import annotations

import numpy as np

__all__ = [
    "dtype", "float16", "float32", "float64", "uint8", "int8", "int16", "int32", "int64",
    "bool_", "half", "float", "double", "long", "int", "short", "get_default_dtype",
    "set_default_dtype", "as_dtype", "to_numpy_dtype",
]


_PY_FLOAT = float  # `float` is rebound below to the gradlog dtype, as torch.float is


class dtype:
    """A tensor element type; ``gl.float32.is_floating_point`` etc. as in PyTorch."""

    __slots__ = ("name", "np", "is_floating_point", "itemsize", "legacy_name")

    def __init__(self, name: str, np_dtype: type, legacy_name: str) -> None:
        self.name = name
        self.np = np.dtype(np_dtype)
        self.is_floating_point = self.np.kind == "f"
        self.itemsize = self.np.itemsize
        self.legacy_name = legacy_name  # PyTorch's type() name, used in hook error messages

    def __repr__(self) -> str:
        return f"gradlog.{self.name}"

    def __reduce__(self) -> str:
        return self.name


float16 = half = dtype("float16", np.float16, "HalfTensor")
float32 = float = dtype("float32", np.float32, "FloatTensor")  # noqa: A001
float64 = double = dtype("float64", np.float64, "DoubleTensor")
uint8 = dtype("uint8", np.uint8, "ByteTensor")
int8 = dtype("int8", np.int8, "CharTensor")
int16 = short = dtype("int16", np.int16, "ShortTensor")
int32 = int = dtype("int32", np.int32, "IntTensor")  # noqa: A001
int64 = long = dtype("int64", np.int64, "LongTensor")
bool_ = dtype("bool", np.bool_, "BoolTensor")

_BY_NUMPY = {d.np: d for d in (float16, float32, float64, uint8, int8, int16, int32, int64, bool_)}
_default = [float32]


def as_dtype(np_dtype: np.dtype) -> dtype:
    """The gradlog dtype of a numpy dtype (TypeError for types gradlog does not hold)."""
    try:
        return _BY_NUMPY[np_dtype]
    except KeyError:
        raise TypeError(f"gradlog tensors cannot hold numpy dtype {np_dtype}") from None


def to_numpy_dtype(d: object) -> np.dtype:
    """Accept a gradlog dtype, a numpy dtype or a Python type (``float``, ``int``, ``bool``)."""
    if isinstance(d, dtype):
        return d.np
    if d is _PY_FLOAT:
        return _default[0].np
    return as_dtype(np.dtype(d)).np


def get_default_dtype() -> dtype:
    return _default[0]


def set_default_dtype(d: dtype) -> None:
    """Set the dtype of tensors made from Python floats (float32 or float64)."""
    if d not in (float32, float64):
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default[0] = d
