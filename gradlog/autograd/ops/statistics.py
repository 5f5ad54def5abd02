"""Statistics over ``dim``: var, std, var_mean, std_mean (one node with two outputs, as in
PyTorch), median and nanmedian (the lower median)."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from ..function import Op
from ..tensor import Tensor, _wrap_dim, wrap
from ._util import as_float, normalize_dims
from .reduction import ValuesAt, _check_nonempty, _expand_back

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
    """The variance array; records on ``ctx`` what the backward needs (``n`` elements per result,
    ``denom`` is n - correction, 0 when there are too few elements: the result is NaN)."""
    n = 1
    for d in dims:
        n *= a.shape[d]
    ctx.in_shape, ctx.dims, ctx.keepdim, ctx.n = a.shape, dims, keepdim, n
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
        return _var_grad(ctx, a, g), None, None, None


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
        return _std_grad(ctx, a, out, g), None, None, None


class VarMean(Op):
    """(variance, mean) in one node; either output's gradient may be missing."""

    node_name = "VarMeanBackward0"

    @staticmethod
    def forward(ctx, a, dims, correction, keepdim):
        ctx.save_for_backward(a)
        return (_variance(ctx, a, dims, correction, keepdim),
                np.mean(a, axis=dims, keepdims=keepdim))

    @staticmethod
    def backward(ctx, g_var, g_mean):
        (a,) = ctx.saved_tensors
        grad = None if g_var is None else _var_grad(ctx, a, g_var)
        return _plus_mean_grad(ctx, grad, g_mean), None, None, None


class StdMean(Op):
    """(standard deviation, mean) in one node."""

    node_name = "StdMeanBackward0"

    @staticmethod
    def forward(ctx, a, dims, correction, keepdim):
        std = np.sqrt(_variance(ctx, a, dims, correction, keepdim))
        ctx.save_for_backward(a, std)
        return std, np.mean(a, axis=dims, keepdims=keepdim)

    @staticmethod
    def backward(ctx, g_std, g_mean):
        a, std = ctx.saved_tensors
        grad = None if g_std is None else _std_grad(ctx, a, std, g_std)
        return _plus_mean_grad(ctx, grad, g_mean), None, None, None


def _var_grad(ctx: Any, a: Tensor, g: Tensor) -> Tensor:
    centered = a - a.mean(ctx.dims, keepdim=True)
    g = _expand_back(g, ctx.in_shape, ctx.dims, ctx.keepdim)
    return g * centered * (2.0 / ctx.denom if ctx.denom else np.nan)


def _std_grad(ctx: Any, a: Tensor, std: Tensor, g: Tensor) -> Tensor:
    centered = a - a.mean(ctx.dims, keepdim=True)
    g = _expand_back(g, ctx.in_shape, ctx.dims, ctx.keepdim)
    std = _expand_back(std, ctx.in_shape, ctx.dims, ctx.keepdim)
    return g * centered / (std * (ctx.denom if ctx.denom else np.nan))


def _plus_mean_grad(ctx: Any, grad: Tensor | None, g_mean: Tensor | None) -> Tensor | None:
    """``grad`` plus the gradient through the mean output (when it got one)."""
    if g_mean is None:
        return grad
    g = _expand_back(g_mean, ctx.in_shape, ctx.dims, ctx.keepdim) / ctx.n
    return g if grad is None else grad + g


def _var_args(dim: Any, unbiased: Any, keepdim: Any) -> tuple:
    if isinstance(dim, bool):  # var(t, unbiased) positional form
        return None, dim, keepdim
    return dim, unbiased, keepdim


def _statistic(op: type, input: Tensor, dim: Any, unbiased: Any, keepdim: Any,
               correction: Any) -> Any:
    dim, unbiased, keepdim = _var_args(dim, unbiased, keepdim)
    dims = normalize_dims(dim, input._data.ndim)
    return op.apply(as_float(input), dims, _correction(unbiased, correction), keepdim)


def var(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> Tensor:
    """Variance with Bessel's correction by default (``correction=1``)."""
    return _statistic(Var, input, dim, unbiased, keepdim, correction)


def std(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> Tensor:
    """Standard deviation with Bessel's correction by default (``correction=1``)."""
    return _statistic(Std, input, dim, unbiased, keepdim, correction)


def var_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple:
    """``(var(input, dim), mean(input, dim))``, computed together."""
    return _statistic(VarMean, input, dim, unbiased, keepdim, correction)


def std_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple:
    """``(std(input, dim), mean(input, dim))``, computed together."""
    return _statistic(StdMean, input, dim, unbiased, keepdim, correction)


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


class MedianDim(ValuesAt):
    node_name = "MedianBackward1"


class NanmedianDim(ValuesAt):
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
