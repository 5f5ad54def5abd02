"""Argument helpers shared by the functional families: int-or-tuple arguments, reduction
names (with PyTorch's legacy ``size_average``/``reduce`` flags), dtype checks."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ...autograd.tensor import Tensor, array_of


def ntuple(value: Any, n: int, name: str) -> tuple:
    """``value`` as an n-tuple of ints (an int is repeated), as PyTorch's ``_pair``."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {n} "
                           f"values to match the convolution dimensions, but got "
                           f"{name}={list(value)}")
    return value


def pair(value: Any, name: str = "value") -> tuple[int, int]:
    return ntuple(value, 2, name)


_REDUCTIONS = ("none", "mean", "sum")


def reduction_of(size_average: Any, reduce: Any, reduction: str) -> str:
    """The reduction to apply; the deprecated flags win when given, as in PyTorch."""
    if size_average is not None or reduce is not None:
        warnings.warn("size_average and reduce args will be deprecated, please use "
                      "reduction='mean' or 'sum' or 'none' instead.", UserWarning, stacklevel=3)
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        if not reduce:
            return "none"
        return "mean" if size_average else "sum"
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def shape_str(shape: tuple) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def check_same_dtype(input: Tensor, other: Tensor | None) -> None:
    """PyTorch refuses mixed float32/float64 operands in layers rather than promoting."""
    if other is not None and array_of(other).dtype != array_of(input).dtype:
        names = {np.dtype(np.float64): "Double", np.dtype(np.float32): "Float",
                 np.dtype(np.float16): "Half"}
        a = names.get(array_of(input).dtype, str(array_of(input).dtype))
        b = names.get(array_of(other).dtype, str(array_of(other).dtype))
        raise RuntimeError(f"expected scalar type {a} but found {b}")
