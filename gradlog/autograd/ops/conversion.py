"""dtype conversion (``to``, ``float``, ``double``, ...) and ``clone``."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..function import Op
from ..tensor import Tensor

__all__ = ["to", "clone", "type_as"]


class ToCopy(Op):
    node_name = "ToCopyBackward0"

    @staticmethod
    def forward(ctx, a, np_dtype):
        ctx.src = a.dtype
        return a.astype(np_dtype)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.src), None


class Clone(Op):
    node_name = "CloneBackward0"

    @staticmethod
    def forward(ctx, a):
        return a.copy()

    @staticmethod
    def backward(ctx, g):
        return g


def clone(input: Tensor, *, memory_format: Any = None) -> Tensor:
    """A copy that stays in the graph (gradients flow back to ``input``)."""
    return Clone.apply(input)


def to(input: Tensor, *args: Any, dtype: Any = None, copy: bool = False, **kwargs: Any) -> Tensor:
    """``to(dtype)``, ``to(other)``, ``to("cpu")``, ``to("cpu", dtype)``: a cast in the graph."""
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, (dtypes.dtype, np.dtype, type)):
            dtype = a
        elif isinstance(a, str) and a.split(":")[0] not in ("cpu",):
            raise RuntimeError(f"gradlog runs on the CPU only; cannot move a tensor to '{a}'")
    if dtype is None:
        return clone(input) if copy else input
    np_dtype = dtypes.to_numpy_dtype(dtype)
    if np_dtype == input._data.dtype:
        return clone(input) if copy else input
    return ToCopy.apply(input, np_dtype)


def type_as(input: Tensor, other: Tensor) -> Tensor:
    return to(input, other._data.dtype)


def _type(self: Tensor, dtype: Any = None) -> Any:
    if dtype is None:
        return f"gradlog.{self.dtype.legacy_name}"
    return to(self, dtype)


TENSOR_METHODS = {
    "to": to, "clone": clone, "type_as": type_as, "type": _type,
    "float": lambda self: to(self, dtypes.float32),
    "double": lambda self: to(self, dtypes.float64),
    "half": lambda self: to(self, dtypes.float16),
    "long": lambda self: to(self, dtypes.int64),
    "int": lambda self: to(self, dtypes.int32),
    "short": lambda self: to(self, dtypes.int16),
    "bool": lambda self: to(self, dtypes.bool_),
    "byte": lambda self: to(self, dtypes.uint8),
    "cpu": lambda self: self,
}
