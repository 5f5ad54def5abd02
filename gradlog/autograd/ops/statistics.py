"""Statistics over ``dim``: var, std, var_mean, std_mean (one node with two outputs, as in
PyTorch), median and nanmedian (the lower median)."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from ..function import Op
from ..tensor import Tensor, _wrap_dim, wrap
from ._util import as_float, normalize_dims
from .reduction import _check_nonempty, _expand_back, _scatter_along

__all__ = ["var", "std", "var_mean", "std_mean", "median", "nanmedian"]

return_types_median = namedtuple("median", ["values", "indices"])
return_types_nanmedian = namedtuple("nanmedian", ["values", "indices"])


def _correction(unbiased: Any, correction: Any) -> float:
    if correction is not None:
        return float(correction)
    if unbiased is None:
        return 1.0
    return 1.0 if unbiased else 0.0


def _variance(ctx: Any, a: np.ndarray, dims: tuple, correction: float, keepdim: bool) -> Any:
    """The variance array; records on ``ctx`` what the backward needs (``denom`` is n - correction,
    0 when there are too few elements, where the result is NaN)."""
    n = 1
    for d in dims:
        n *= a.shape[d]
    ctx.in_shape, ctx.dims, ctx.keepdim = a.shape, dims, keepdim
    ctx.denom = n - correction if n > correction else 0.0
    return np.var(a, axis=dims, keepdims=keepdim, ddof=correction) if n > correction else \
        np.full(np.sum(a, axis=dims, keepdims=keepdim).shape, np.nan, dtype=a.dtype)


class Var(Op):
    node_name = "VarBackward0"

    @staticmethod
    def forward(ctx, a, dims, correction, keepdim):
        ctx.save_for_backward(a)
        return _variance(ctx, a, dims, correction, keepdim)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        centered = a - a.mean(ctx.dims, keepdim=True)
        g = _expand_back(g, ctx.in_shape, ctx.dims, ctx.keepdim)
        return g * centered * (2.0 / ctx.denom if ctx.denom else np.nan), None, None, None


def _var_args(dim: Any, unbiased: Any, keepdim: Any) -> tuple:
    if isinstance(dim, bool):  # var(t, unbiased) positional form
        return None, dim, keepdim
    return dim, unbiased, keepdim


def var(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> Tensor:
    """Variance with Bessel's correction by default (``correction=1``)."""
    dim, unbiased, keepdim = _var_args(dim, unbiased, keepdim)
    dims = normalize_dims(dim, input._data.ndim)
    return Var.apply(as_float(input), dims, _correction(unbiased, correction), keepdim)


class Std(Op):
    node_name = "StdBackward0"

    @staticmethod
    def forward(ctx, a, dims, correction, keepdim):
        out = np.sqrt(_variance(ctx, a, dims, correction, keepdim))
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        centered = a - a.mean(ctx.dims, keepdim=True)
        g = _expand_back(g, ctx.in_shape, ctx.dims, ctx.keepdim)
        out = _expand_back(out, ctx.in_shape, ctx.dims, ctx.keepdim)
        return g * centered / (out * (ctx.denom if ctx.denom else np.nan)), None, None, None


def std(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> Tensor:
    """Standard deviation with Bessel's correction by default (``correction=1``)."""
    dim, unbiased, keepdim = _var_args(dim, unbiased, keepdim)
    dims = normalize_dims(dim, input._data.ndim)
    return Std.apply(as_float(input), dims, _correction(unbiased, correction), keepdim)


class VarMean(Op):
    """(variance, mean) in one node; either output's gradient may be missing."""

    node_name = "VarMeanBackward0"

    @staticmethod
    def forward(ctx, a, dims, correction, keepdim):
        ctx.save_for_backward(a)
        ctx.n = _count(a, dims)
        return (_variance(ctx, a, dims, correction, keepdim),
                np.mean(a, axis=dims, keepdims=keepdim))

    @staticmethod
    def backward(ctx, g_var, g_mean):
        (a,) = ctx.saved_tensors
        grad = None
        if g_var is not None:
            centered = a - a.mean(ctx.dims, keepdim=True)
            g = _expand_back(g_var, ctx.in_shape, ctx.dims, ctx.keepdim)
            grad = g * centered * (2.0 / ctx.denom if ctx.denom else np.nan)
        if g_mean is not None:
            g = _expand_back(g_mean, ctx.in_shape, ctx.dims, ctx.keepdim) / ctx.n
            grad = g if grad is None else grad + g
        return grad, None, None, None


class StdMean(Op):
    """(standard deviation, mean) in one node."""

    node_name = "StdMeanBackward0"

    @staticmethod
    def forward(ctx, a, dims, correction, keepdim):
        std = np.sqrt(_variance(ctx, a, dims, correction, keepdim))
        ctx.n = _count(a, dims)
        ctx.save_for_backward(a, std)
        return std, np.mean(a, axis=dims, keepdims=keepdim)

    @staticmethod
    def backward(ctx, g_std, g_mean):
        a, std = ctx.saved_tensors
        grad = None
        if g_std is not None:
            centered = a - a.mean(ctx.dims, keepdim=True)
            g = _expand_back(g_std, ctx.in_shape, ctx.dims, ctx.keepdim)
            s = _expand_back(std, ctx.in_shape, ctx.dims, ctx.keepdim)
            grad = g * centered / (s * (ctx.denom if ctx.denom else np.nan))
        if g_mean is not None:
            g = _expand_back(g_mean, ctx.in_shape, ctx.dims, ctx.keepdim) / ctx.n
            grad = g if grad is None else grad + g
        return grad, None, None, None


def _count(a: np.ndarray, dims: tuple) -> int:
    n = 1
    for d in dims:
        n *= a.shape[d]
    return n


def var_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple:
    """``(var(input, dim), mean(input, dim))``, computed together."""
    dim, unbiased, keepdim = _var_args(dim, unbiased, keepdim)
    dims = normalize_dims(dim, input._data.ndim)
    return VarMean.apply(as_float(input), dims, _correction(unbiased, correction), keepdim)


def std_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple:
    """``(std(input, dim), mean(input, dim))``, computed together."""
    dim, unbiased, keepdim = _var_args(dim, unbiased, keepdim)
    dims = normalize_dims(dim, input._data.ndim)
    return StdMean.apply(as_float(input), dims, _correction(unbiased, correction), keepdim)


class MedianAll(Op):
    """The lower median of all elements; the gradient is shared evenly among the elements
    equal to it (NaN: among the NaNs), as PyTorch does."""

    node_name = "MedianBackward0"
    ignore_nan = False

    @classmethod
    def forward(cls, ctx, a):
        flat = a.reshape(-1)
        nan = np.isnan(flat)
        if cls.ignore_nan:
            flat = flat[~nan]
        if flat.size == 0 or (not cls.ignore_nan and nan.any()):
            out = np.array(np.nan, dtype=a.dtype)
            share = np.isnan(a)
        else:
            out = np.partition(flat, (flat.size - 1) // 2)[(flat.size - 1) // 2]
            share = a == out
        ctx.save_for_backward(share / max(share.sum(), 1))
        return np.asarray(out, dtype=a.dtype)

    @staticmethod
    def backward(ctx, g):
        (share,) = ctx.saved_tensors
        return g * share


class NanmedianAll(MedianAll):
    node_name = "NanmedianBackward0"
    ignore_nan = True


class MedianDim(Op):
    """Lower median along one dimension (values; the indices are computed beside it); the
    gradient goes to the index."""

    node_name = "MedianBackward1"

    @staticmethod
    def forward(ctx, a, d, keepdim, idx):
        ctx.save_for_backward(idx)
        ctx.in_shape, ctx.d, ctx.keepdim = a.shape, d, keepdim
        out = np.take_along_axis(a, idx, d)
        return out if keepdim else np.squeeze(out, d)

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        if not ctx.keepdim:
            g = g.unsqueeze(ctx.d)
        return _scatter_along(g, idx._data, ctx.d, ctx.in_shape), None, None, None


class NanmedianDim(MedianDim):
    node_name = "NanmedianBackward1"


def _median_indices(a: np.ndarray, d: int, ignore_nan: bool) -> np.ndarray:
    """Index of the lower median along ``d`` (kept as a size-1 dimension): NaNs sort last;
    with NaN in a slice the median is its first NaN, unless NaNs are ignored."""
    order = np.argsort(a, axis=d, kind="stable")
    nan = np.isnan(a) if a.dtype.kind == "f" else np.zeros(a.shape, bool)
    valid = a.shape[d] - nan.sum(axis=d, keepdims=True)
    counted = np.maximum(valid, 1) if ignore_nan else np.full(valid.shape, a.shape[d])
    idx = np.take_along_axis(order, (counted - 1) // 2, d)
    if not ignore_nan:
        first_nan = np.expand_dims(np.argmax(nan, axis=d), d)
        idx = np.where(valid < a.shape[d], first_nan, idx)
    return idx


def _median(input: Tensor, dim: Any, keepdim: bool, ignore_nan: bool) -> Any:
    name = "nanmedian" if ignore_nan else "median"
    if dim is None:
        _check_nonempty(input, name, None)
        return (NanmedianAll if ignore_nan else MedianAll).apply(input)
    d = _wrap_dim(dim, input._data.ndim)
    if input._data.ndim == 0:
        return (return_types_nanmedian if ignore_nan else return_types_median)(
            input.clone(), wrap(np.array(0)))
    _check_nonempty(input, name, (d,))
    idx = _median_indices(input._data, d, ignore_nan)
    values = (NanmedianDim if ignore_nan else MedianDim).apply(input, d, keepdim, idx)
    indices = idx if keepdim else np.squeeze(idx, d)
    return (return_types_nanmedian if ignore_nan else return_types_median)(
        values, wrap(indices.astype(np.int64)))


def median(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """The lower median of all elements, or ``(values, indices)`` along ``dim``; NaN wins."""
    return _median(input, dim, keepdim, False)


def nanmedian(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """As ``median``, ignoring NaN values."""
    return _median(input, dim, keepdim, True)


TENSOR_METHODS = {
    "var": var, "std": std, "var_mean": var_mean, "std_mean": std_mean, "median": median,
    "nanmedian": nanmedian,
}
