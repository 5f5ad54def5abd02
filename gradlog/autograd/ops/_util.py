"""Helpers shared by the op families: broadcasting reduction and type promotion."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..tensor import Tensor, wrap


def unbroadcast(grad: Tensor, shape: tuple) -> Tensor:
    """Sum ``grad`` over the dimensions broadcasting added, back to ``shape``.

    Written with tensor ops, so it is differentiable for double backward.
    """
    gshape = grad._data.shape
    if gshape == shape:
        return grad
    lead = len(gshape) - len(shape)
    dims = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and gshape[lead + i] != 1)
    if dims:
        grad = grad.sum(dims, keepdim=True)
    if lead or grad._data.shape != shape:
        grad = grad.reshape(shape)
    return grad


_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}


def result_dtype(a: np.ndarray, b: np.ndarray) -> np.dtype:
    """PyTorch's promotion for two tensors: category first (bool < int < float); within a
    category the dimensioned operand wins over a 0-d one, else the wider type."""
    da, db = a.dtype, b.dtype
    if da == db:
        return da
    ca, cb = _CATEGORY.get(da.kind, 2), _CATEGORY.get(db.kind, 2)
    if ca != cb:
        hi, hi_arr, lo_arr = (da, a, b) if ca > cb else (db, b, a)
        if hi_arr.ndim == 0 and lo_arr.ndim > 0 and hi.kind == "f":
            return hi  # a 0-d float tensor still lifts an int tensor to its own float type
        return hi
    if a.ndim == 0 and b.ndim > 0:
        return db
    if b.ndim == 0 and a.ndim > 0:
        return da
    return np.promote_types(da, db)


def shape_of(x: Any) -> tuple:
    return x._data.shape if isinstance(x, Tensor) else np.shape(x)


def check_broadcast(*shapes: tuple) -> None:
    """Raise PyTorch's RuntimeError if ``shapes`` do not broadcast together (numpy's ValueError
    says the same less precisely)."""
    out = tuple(shapes[0])
    for shape in shapes[1:]:
        n = max(len(out), len(shape))
        a, b = (1,) * (n - len(out)) + out, (1,) * (n - len(shape)) + tuple(shape)
        for i in range(n - 1, -1, -1):  # PyTorch reports the first mismatch from the right
            if a[i] != b[i] and a[i] != 1 and b[i] != 1:
                raise RuntimeError(f"The size of tensor a ({a[i]}) must match the size of tensor "
                                   f"b ({b[i]}) at non-singleton dimension {i}")
        out = tuple(x if y == 1 else y for x, y in zip(a, b))


def scalar_type_name(dtype: np.dtype) -> str:
    """PyTorch's name of a scalar type in messages: Float, Double, Long, Int, Bool, ..."""
    return dtypes.as_dtype(np.dtype(dtype)).legacy_name.removesuffix("Tensor")


def check_cast(result: np.dtype, out: np.dtype) -> None:
    """PyTorch's refusal to write a result into a tensor of a lower dtype category."""
    if result != out and not np.can_cast(result, out, "same_kind"):
        raise RuntimeError(f"result type {scalar_type_name(result)} can't be cast to the "
                           f"desired output type {scalar_type_name(out)}")


def promote_dtypes(a: np.dtype, b: np.dtype) -> np.dtype:
    """PyTorch's promotion of two dimensioned operands' dtypes: the higher category wins
    (bool < int < float: int64 with float32 is float32), else the wider type."""
    if a == b:
        return a
    ca, cb = _CATEGORY.get(a.kind, 2), _CATEGORY.get(b.kind, 2)
    if ca != cb:
        return a if ca > cb else b
    return np.promote_types(a, b)


def scalar_result_dtype(t: np.ndarray, value: Any) -> np.dtype:
    """dtype of ``tensor op python_number``: the tensor's, unless the number is of a higher
    category (an int tensor with a float gives the default float dtype)."""
    kind = t.dtype.kind
    if isinstance(value, (bool, np.bool_)):
        return t.dtype
    if isinstance(value, (int, np.integer)):
        return np.dtype(np.int64) if kind == "b" else t.dtype
    if isinstance(value, (float, np.floating)):
        return t.dtype if kind == "f" else dtypes.get_default_dtype().np
    if isinstance(value, complex):
        raise TypeError("gradlog tensors do not support complex numbers")
    raise TypeError(f"unsupported operand type: {type(value).__name__}")


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.number, np.bool_, bool)) and not isinstance(x, Tensor)


def python_scalar(x: Any) -> Any:
    """A numpy scalar as the Python number it holds: numpy types its scalars (NEP 50), so
    ``float32_array * np.float64(2)`` would be float64; PyTorch treats them as Python numbers."""
    return x.item() if isinstance(x, np.generic) else x


def as_float(t: Tensor) -> Tensor:
    """``t`` in the default float dtype if it is an integer or bool tensor (for true division,
    exp, ...); float tensors are returned unchanged."""
    if t._data.dtype.kind == "f":
        return t
    return wrap(t._data.astype(dtypes.get_default_dtype().np))


def tensor_operand(x: Any, like: Tensor) -> Tensor:
    """Make a Tensor from a non-tensor operand (numbers, lists, arrays) for a binary op."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return wrap(x)
    from ..creation import tensor
    return tensor(x)


def normalize_dims(dim: Any, ndim: int) -> tuple:
    """``dim`` (int, sequence or None) as a sorted tuple of non-negative axes."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (int, np.integer)):
        dim = (dim,)
    n = max(ndim, 1)
    out = []
    for d in dim:
        if not -n <= d < n:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-n}, {n - 1}], but got {d})")
        out.append(int(d) % n)
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {out} appears multiple times in the list of dims")
    return tuple(sorted(out)) if ndim else ()
