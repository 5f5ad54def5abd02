"""Comparisons and selection: eq/ne/lt/le/gt/ge, isnan/isinf/isfinite, logical ops, where,
maximum/minimum, masked_fill, sort/topk."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from .. import dtypes
from ..function import Op
from ..tensor import Tensor, _wrap_dim, wrap
from ._util import (
    check_broadcast,
    is_number,
    result_dtype,
    scalar_result_dtype,
    scalar_type_name,
    shape_of,
    unbroadcast,
)
from .reduction import _GatherAlong

__all__ = ["eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "logical_not",
           "logical_and", "logical_or", "logical_xor", "where", "maximum", "minimum",
           "masked_fill", "equal", "allclose", "isclose", "nonzero", "sort", "argsort", "topk"]


def _raw(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x._data
    if isinstance(x, (list, tuple)):
        return np.asarray(x)
    return x


def _cmp(fn: Any) -> Any:
    def compare(input: Tensor, other: Any) -> Tensor:
        if other is None:
            return NotImplemented
        return wrap(np.asarray(fn(_raw(input), _raw(other))))
    compare.__name__ = fn.__name__
    return compare


eq = _cmp(np.equal)
ne = _cmp(np.not_equal)
lt = _cmp(np.less)
le = _cmp(np.less_equal)
gt = _cmp(np.greater)
ge = _cmp(np.greater_equal)


def isnan(input: Tensor) -> Tensor:
    return wrap(np.isnan(input._data) if input._data.dtype.kind == "f"
                else np.zeros(input._data.shape, bool))


def isinf(input: Tensor) -> Tensor:
    return wrap(np.isinf(input._data) if input._data.dtype.kind == "f"
                else np.zeros(input._data.shape, bool))


def isfinite(input: Tensor) -> Tensor:
    return wrap(np.isfinite(input._data) if input._data.dtype.kind == "f"
                else np.ones(input._data.shape, bool))


def logical_not(input: Tensor) -> Tensor:
    return wrap(np.logical_not(input._data))


def logical_and(input: Tensor, other: Any) -> Tensor:
    return wrap(np.asarray(np.logical_and(input._data, _raw(other))))


def logical_or(input: Tensor, other: Any) -> Tensor:
    return wrap(np.asarray(np.logical_or(input._data, _raw(other))))


def logical_xor(input: Tensor, other: Any) -> Tensor:
    return wrap(np.asarray(np.logical_xor(input._data, _raw(other))))


def _bitwise(fn: Any, name: str) -> Any:
    def op(input: Tensor, other: Any) -> Tensor:
        a, b = input._data, _raw(other)
        if a.dtype.kind == "f" or np.asarray(b).dtype.kind == "f":
            raise RuntimeError(f"\"{name}_cpu\" not implemented for 'Float'")
        return wrap(np.asarray(fn(a, b)))
    return op


def _invert(input: Tensor) -> Tensor:
    if input._data.dtype.kind == "f":
        raise RuntimeError("~ (bitwise_not) is only supported for integer and bool tensors")
    return wrap(np.invert(input._data))


class Where(Op):
    node_name = "WhereBackward0"
    number_inputs = (1, 2)

    @staticmethod
    def forward(ctx, cond, a, b):
        ctx.save_for_backward(cond)
        ctx.shapes = (np.shape(a), np.shape(b))
        return np.where(cond, a, b)

    @staticmethod
    def backward(ctx, g):
        from .activation import MaskMul
        _, na, nb = ctx.needs_input_grad
        cond = ctx.saved_tensors[0]._data
        sa, sb = ctx.shapes
        ga = unbroadcast(MaskMul.apply(g, cond), sa) if na else None
        gb = unbroadcast(MaskMul.apply(g, ~cond), sb) if nb else None
        return None, ga, gb


def where(condition: Any, input: Any = None, other: Any = None) -> Any:
    """Elementwise ``input if condition else other``; ``where(cond)`` alone is ``nonzero``."""
    if input is None and other is None:
        return tuple(wrap(i.astype(np.int64)) for i in np.nonzero(_raw(condition)))
    cond = np.asarray(_raw(condition))
    if cond.dtype != np.bool_:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor "
                           f"with dtype {scalar_type_name(cond.dtype)}")
    a_t, b_t = isinstance(input, Tensor), isinstance(other, Tensor)
    if a_t and b_t:
        dt = result_dtype(input._data, other._data)
    elif a_t:
        dt = scalar_result_dtype(input._data, other) if not isinstance(other, np.ndarray) \
            else result_dtype(input._data, other)
    elif b_t:
        dt = scalar_result_dtype(other._data, input) if not isinstance(input, np.ndarray) \
            else result_dtype(other._data, input)
    elif is_number(input) and is_number(other):  # Python numbers: PyTorch's default dtypes
        kinds = {np.asarray(v).dtype.kind for v in (input, other)}
        dt = (dtypes.get_default_dtype().np if "f" in kinds
              else np.dtype(np.int64) if kinds & set("iu") else np.dtype(np.bool_))
        return wrap(np.where(cond, input, other).astype(dt))
    else:
        return wrap(np.asarray(np.where(cond, input, other)))
    if a_t and input._data.dtype != dt:
        input = input.to(dt)
    if b_t and other._data.dtype != dt:
        other = other.to(dt)
    if not a_t:
        input = np.asarray(input, dtype=dt)
    if not b_t:
        other = np.asarray(other, dtype=dt)
    try:
        return Where.apply(cond, input, other)
    except ValueError:
        check_broadcast(cond.shape, shape_of(input), shape_of(other))
        raise


def _where_method(self: Tensor, condition: Any, y: Any) -> Tensor:
    return where(condition, self, y)


class MaxMin(Op):
    """maximum / minimum; ties share the gradient equally, as in PyTorch."""

    node_name = "MaximumBackward0"
    fn = staticmethod(np.maximum)

    @classmethod
    def forward(cls, ctx, a, b):
        out = cls.fn(a, b)
        wins_a = np.where(a == b, 0.5, (out == a).astype(np.float64)).astype(out.dtype)
        ctx.save_for_backward(wins_a)
        ctx.shapes = (np.shape(a), np.shape(b))
        return out

    @staticmethod
    def backward(ctx, g):
        (wa,) = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        sa, sb = ctx.shapes
        return (unbroadcast(g * wa, sa) if na else None,
                unbroadcast(g * (1 - wa), sb) if nb else None)


class Minimum(MaxMin):
    node_name = "MinimumBackward0"
    fn = staticmethod(np.minimum)


def _binary_maxmin(op: type, input: Tensor, other: Any) -> Tensor:
    from .arithmetic import binary
    return binary(op, input, other)


def maximum(input: Tensor, other: Any) -> Tensor:
    return _binary_maxmin(MaxMin, input, other)


def minimum(input: Tensor, other: Any) -> Tensor:
    return _binary_maxmin(Minimum, input, other)


_CPP_TYPE = {"int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char",
             "uint8": "unsigned char", "float32": "float", "float64": "double",
             "float16": "c10::Half"}  # the type names in PyTorch's masked_fill message


class MaskedFill(Where):
    node_name = "MaskedFillBackward0"


def masked_fill(input: Tensor, mask: Any, value: Any) -> Tensor:
    """Out-of-place: ``value`` where ``mask`` is true (broadcast), ``input`` elsewhere."""
    m = np.asarray(_raw(mask))
    if m.dtype != np.bool_:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{_CPP_TYPE.get(m.dtype.name, m.dtype.name)}")
    if isinstance(value, Tensor):
        if value._data.ndim:
            raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor, but got "
                               f"tensor with {value._data.ndim} dimension(s).")
        value = value.to(input._data.dtype)
    else:
        value = np.asarray(value, dtype=input._data.dtype)
    return MaskedFill.apply(m, value, input)


def equal(input: Tensor, other: Tensor) -> bool:
    return input._data.shape == other._data.shape and bool(np.array_equal(input._data,
                                                                          other._data))


def isclose(input: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    return wrap(np.asarray(np.isclose(input._data, _raw(other), rtol, atol, equal_nan)))


def allclose(input: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    return bool(np.allclose(input._data, _raw(other), rtol, atol, equal_nan))


def nonzero(input: Tensor, *, as_tuple: bool = False) -> Any:
    idx = np.nonzero(input._data)
    if as_tuple:
        return tuple(wrap(i.astype(np.int64)) for i in idx)
    return wrap(np.stack(idx, axis=1).astype(np.int64) if idx else np.zeros((0, 0), np.int64))


return_types_sort = namedtuple("sort", ["values", "indices"])
return_types_topk = namedtuple("topk", ["values", "indices"])


class _Sort(_GatherAlong):
    node_name = "SortBackward0"


class _Topk(_GatherAlong):
    node_name = "TopkBackward0"


def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
    d = _wrap_dim(dim, input._data.ndim)
    key = -input._data if descending else input._data
    idx = np.argsort(key, axis=d, kind="stable")
    values = _Sort.apply(input, idx, d)
    return return_types_sort(values, wrap(idx.astype(np.int64)))


def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    return sort(input, dim, descending, stable).indices


def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    d = _wrap_dim(dim, input._data.ndim)
    if not 0 <= k <= input._data.shape[d]:
        raise RuntimeError(f"selected index k out of range: k={k} for a dimension of size "
                           f"{input._data.shape[d]}")
    key = -input._data if largest else input._data
    idx = np.take(np.argsort(key, axis=d, kind="stable"), range(k), axis=d)
    values = _Topk.apply(input, idx, d)
    return return_types_topk(values, wrap(idx.astype(np.int64)))


TENSOR_METHODS = {
    "eq": eq, "ne": ne, "lt": lt, "le": le, "gt": gt, "ge": ge,
    "__eq__": eq, "__ne__": ne, "__lt__": lt, "__le__": le, "__gt__": gt, "__ge__": ge,
    "greater": gt, "less": lt, "greater_equal": ge, "less_equal": le, "not_equal": ne,
    "isnan": isnan, "isinf": isinf, "isfinite": isfinite, "logical_not": logical_not,
    "logical_and": logical_and, "logical_or": logical_or, "logical_xor": logical_xor,
    "__invert__": _invert, "__and__": _bitwise(np.bitwise_and, "bitwise_and"),
    "__or__": _bitwise(np.bitwise_or, "bitwise_or"),
    "__xor__": _bitwise(np.bitwise_xor, "bitwise_xor"),
    "where": _where_method, "maximum": maximum, "minimum": minimum,
    "masked_fill": masked_fill, "equal": equal, "isclose": isclose, "allclose": allclose,
    "nonzero": nonzero, "sort": sort, "argsort": argsort, "topk": topk,
}
