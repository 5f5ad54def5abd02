"""Reductions with ``dim`` / ``keepdim``: sum, mean, max/min, amax/amin, argmax/argmin, var,
std, norm, prod, logsumexp, cumsum, any, all."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from .. import dtypes
from ..function import Op
from ..tensor import Tensor, _wrap_dim, wrap
from ._util import as_float, normalize_dims, scalar_type_name

__all__ = ["sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "norm", "prod",
           "logsumexp", "any", "all", "aminmax", "count_nonzero", "nansum", "nanmean"]

return_types_max = namedtuple("max", ["values", "indices"])
return_types_min = namedtuple("min", ["values", "indices"])


def _keep_shape(in_shape: tuple, dims: tuple) -> tuple:
    return tuple(1 if i in dims else s for i, s in enumerate(in_shape))


def _expand_back(g: Tensor, in_shape: tuple, dims: tuple, keepdim: bool) -> Tensor:
    """Broadcast a reduced gradient back to the input's shape (tensor ops: differentiable)."""
    if not keepdim and dims:
        g = g.reshape(_keep_shape(in_shape, dims))
    if g._data.shape != in_shape:
        g = g.expand(in_shape)
    return g


class Sum(Op):
    node_name = "SumBackward0"

    @staticmethod
    def forward(ctx, a, dims, keepdim, np_dtype):
        ctx.in_shape, ctx.dims, ctx.keepdim = a.shape, dims, keepdim
        return np.sum(a, axis=dims, keepdims=keepdim, dtype=np_dtype)

    @staticmethod
    def backward(ctx, g):
        return _expand_back(g, ctx.in_shape, ctx.dims, ctx.keepdim), None, None, None


class SumDim(Sum):
    node_name = "SumBackward1"


def _sum_dtype(a: np.ndarray, dtype: Any) -> Any:
    if dtype is not None:
        return dtypes.to_numpy_dtype(dtype)
    if a.dtype.kind in "biu":
        return np.int64
    return None


def sum(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """Sum over ``dim`` (all dimensions by default)."""
    dims = normalize_dims(dim, input._data.ndim)
    op = Sum if dim is None else SumDim
    return op.apply(input, dims, keepdim, _sum_dtype(input._data, dtype))


class Nansum(Op):
    """Sum with NaN counted as zero; NaN elements get no gradient."""

    node_name = "NansumBackward0"

    @staticmethod
    def forward(ctx, a, dims, keepdim, np_dtype):
        nan = np.isnan(a) if a.dtype.kind == "f" else None
        ctx.save_for_backward(nan)
        ctx.in_shape, ctx.dims, ctx.keepdim = a.shape, dims, keepdim
        return np.nansum(a, axis=dims, keepdims=keepdim, dtype=np_dtype)

    @staticmethod
    def backward(ctx, g):
        (nan,) = ctx.saved_tensors
        g = _expand_back(g, ctx.in_shape, ctx.dims, ctx.keepdim)
        if nan is not None and nan._data.any():
            g = g.where(~nan._data, 0.0)
        return g, None, None, None


def nansum(input: Tensor, dim: Any = None, keepdim: bool = False, *,
           dtype: Any = None) -> Tensor:
    """Sum over ``dim`` treating NaN as zero."""
    dims = normalize_dims(dim, input._data.ndim)
    return Nansum.apply(input, dims, keepdim, _sum_dtype(input._data, dtype))


def nanmean(input: Tensor, dim: Any = None, keepdim: bool = False, *,
            dtype: Any = None) -> Tensor:
    """Mean over ``dim`` of the elements that are not NaN (PyTorch's: nansum / their count)."""
    if input._data.dtype.kind != "f" and dtype is None:
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex dtype "
                           f"but got {scalar_type_name(input._data.dtype)}")
    if dtype is not None:
        input = input.to(dtype)
    count = (~input.isnan()).sum(dim, keepdim)
    return nansum(input, dim, keepdim) / count


class Mean(Op):
    node_name = "MeanBackward0"

    @staticmethod
    def forward(ctx, a, dims, keepdim):
        ctx.in_shape, ctx.dims, ctx.keepdim = a.shape, dims, keepdim
        n = 1
        for d in dims:
            n *= a.shape[d]
        ctx.n = n
        return np.mean(a, axis=dims, keepdims=keepdim)

    @staticmethod
    def backward(ctx, g):
        return _expand_back(g / ctx.n, ctx.in_shape, ctx.dims, ctx.keepdim), None, None


class MeanDim(Mean):
    node_name = "MeanBackward1"


def mean(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    if input._data.dtype.kind != "f" and dtype is None:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: "
                           f"{scalar_type_name(input._data.dtype)}")
    if dtype is not None:
        input = input.to(dtype)
    dims = normalize_dims(dim, input._data.ndim)
    return (Mean if dim is None else MeanDim).apply(input, dims, keepdim)


class AmaxAmin(Op):
    """Max or min over dims; the gradient is shared evenly among ties (as PyTorch's amax)."""

    node_name = "AmaxBackward0"
    reduce = staticmethod(np.max)
    nan_shares = False  # as PyTorch: amax's gradient is NaN where the max is NaN, max()'s goes
    #                     to the NaN elements

    @classmethod
    def forward(cls, ctx, a, dims, keepdim):
        out = cls.reduce(a, axis=dims, keepdims=True)
        mask = a == out
        if cls.nan_shares and a.dtype.kind == "f" and np.isnan(out).any():
            mask |= np.isnan(a) & np.isnan(out)
        with np.errstate(invalid="ignore"):  # no element equals a NaN max: a NaN share
            ctx.save_for_backward(mask / mask.sum(axis=dims, keepdims=True, dtype=a.dtype))
        ctx.in_shape, ctx.dims, ctx.keepdim = a.shape, dims, keepdim
        return out if keepdim else out.reshape(
            tuple(s for i, s in enumerate(a.shape) if i not in dims))

    @staticmethod
    def backward(ctx, g):
        (share,) = ctx.saved_tensors
        return _expand_back(g, ctx.in_shape, ctx.dims, ctx.keepdim) * share, None, None


class Amin(AmaxAmin):
    node_name = "AminBackward0"
    reduce = staticmethod(np.min)


class MaxAll(AmaxAmin):
    node_name = "MaxBackward1"
    nan_shares = True


class MinAll(Amin):
    node_name = "MinBackward1"
    nan_shares = True


def _check_nonempty(input: Tensor, name: str, dims: tuple | None) -> None:
    """PyTorch's errors for reducing an empty tensor: over all of it (``dims`` None), or over a
    dimension of size 0."""
    if input._data.size:
        return
    if dims is None:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() "
                           "== 0. Specify the reduction dim with the 'dim' argument.")
    for d in dims:
        if input._data.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def amax(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    dims = normalize_dims(dim if dim != () else None, input._data.ndim)
    _check_nonempty(input, "amax", dims if dim != () else None)
    return AmaxAmin.apply(input, dims, keepdim)


def amin(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    dims = normalize_dims(dim if dim != () else None, input._data.ndim)
    _check_nonempty(input, "amin", dims if dim != () else None)
    return Amin.apply(input, dims, keepdim)


class ValuesAt(Op):
    """The values at given indices along one dimension (``idx``, kept as a size-1 dimension):
    the values of ``max(dim)``, ``median(dim)``, ...; the gradient goes to those indices."""

    node_name = "GatherBackward0"

    @staticmethod
    def forward(ctx, a, d, keepdim, idx):
        ctx.save_for_backward(idx)
        ctx.in_shape, ctx.d, ctx.keepdim = a.shape, d, keepdim
        out = np.take_along_axis(a, idx, d)
        return out if keepdim else np.squeeze(out, d)

    @staticmethod
    def backward(ctx, g):
        if not ctx.keepdim:
            g = g.unsqueeze(ctx.d)
        (idx,) = ctx.saved_tensors
        return _scatter_along(g, idx._data, ctx.d, ctx.in_shape), None, None, None


class MaxDim(ValuesAt):
    node_name = "MaxBackward0"


class MinDim(ValuesAt):
    node_name = "MinBackward0"


class _ScatterAlong(Op):
    node_name = "ScatterBackward0"

    @staticmethod
    def forward(ctx, g, idx, d, shape):
        ctx.save_for_backward(idx)
        ctx.d = d
        out = np.zeros(shape, dtype=g.dtype)
        np.put_along_axis(out, idx, g, d)
        return out

    @staticmethod
    def backward(ctx, gg):
        (idx,) = ctx.saved_tensors
        return _GatherAlong.apply(gg, idx._data, ctx.d), None, None, None


class _GatherAlong(Op):
    node_name = "GatherBackward0"

    @staticmethod
    def forward(ctx, a, idx, d):
        ctx.save_for_backward(idx)
        ctx.d, ctx.shape = d, a.shape
        return np.take_along_axis(a, idx, d)

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        return _ScatterAlong.apply(g, idx._data, ctx.d, ctx.shape), None, None


def _scatter_along(g: Tensor, idx: np.ndarray, d: int, shape: tuple) -> Tensor:
    return _ScatterAlong.apply(g, idx, d, shape)


def _max_min(input: Tensor, dim: Any, keepdim: bool, other: Any, is_max: bool) -> Any:
    name = "max" if is_max else "min"
    if isinstance(dim, Tensor) and other is None:
        dim, other = None, dim
    if other is not None:
        from .compare import maximum, minimum
        return (maximum if is_max else minimum)(input, other)
    if dim is None:
        _check_nonempty(input, name, None)
        dims = tuple(range(input._data.ndim))
        return (MaxAll if is_max else MinAll).apply(input, dims, False)
    d = _wrap_dim(dim, input._data.ndim)
    if input._data.shape and input._data.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    if input._data.ndim == 0:
        values = input.clone()
        return (return_types_max if is_max else return_types_min)(values, wrap(np.array(0)))
    idx = np.expand_dims((np.argmax if is_max else np.argmin)(input._data, axis=d), d)
    values = (MaxDim if is_max else MinDim).apply(input, d, keepdim, idx)
    indices = idx if keepdim else np.squeeze(idx, d)
    return (return_types_max if is_max else return_types_min)(values,
                                                               wrap(indices.astype(np.int64)))


def max(input: Tensor, dim: Any = None, keepdim: bool = False, *, other: Any = None) -> Any:
    """``max(t)`` (a value), ``max(t, dim)`` (values, indices) or ``max(a, b)`` (elementwise)."""
    return _max_min(input, dim, keepdim, other, True)


def min(input: Tensor, dim: Any = None, keepdim: bool = False, *, other: Any = None) -> Any:
    return _max_min(input, dim, keepdim, other, False)


def aminmax(input: Tensor, *, dim: Any = None, keepdim: bool = False) -> tuple:
    d = () if dim is None else dim
    return amin(input, d, keepdim), amax(input, d, keepdim)


def argmax(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    if dim is None:
        if not input._data.size:
            raise IndexError("argmax(): Expected reduction dim to be specified for input.numel() "
                             "== 0.")
        return wrap(np.asarray(np.argmax(input._data), dtype=np.int64))
    d = _wrap_dim(dim, input._data.ndim)
    _check_nonempty(input, "argmax", (d,) if input._data.ndim else ())
    return wrap(np.asarray(np.argmax(input._data, axis=d, keepdims=keepdim), dtype=np.int64))


def argmin(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    if dim is None:
        if not input._data.size:
            raise IndexError("argmin(): Expected reduction dim to be specified for input.numel() "
                             "== 0.")
        return wrap(np.asarray(np.argmin(input._data), dtype=np.int64))
    d = _wrap_dim(dim, input._data.ndim)
    _check_nonempty(input, "argmin", (d,) if input._data.ndim else ())
    return wrap(np.asarray(np.argmin(input._data, axis=d, keepdims=keepdim), dtype=np.int64))


class Norm2(Op):
    """Euclidean norm; its gradient is 0 (not NaN) where the norm is 0, as in PyTorch."""

    node_name = "LinalgVectorNormBackward0"

    @staticmethod
    def forward(ctx, a, dims, keepdim):
        out = np.sqrt(np.sum(a * a, axis=dims, keepdims=keepdim))
        ctx.in_shape, ctx.dims, ctx.keepdim = a.shape, dims, keepdim
        ctx.save_for_backward(a, out)  # the output itself, so double backward sees it vary
        return out

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        g = _expand_back(g, ctx.in_shape, ctx.dims, ctx.keepdim)
        out = _expand_back(out, ctx.in_shape, ctx.dims, ctx.keepdim)
        safe = out.where(out._data != 0, 1.0) if (out._data == 0).any() else out
        return g * a / safe, None, None


def norm(input: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False,
         dtype: Any = None) -> Tensor:
    """Vector p-norm over ``dim`` (all elements by default); ``p`` may be inf or -inf."""
    x = as_float(input if dtype is None else input.to(dtype))
    dims = normalize_dims(dim, x._data.ndim)
    if p in ("fro", 2, 2.0, None):
        return Norm2.apply(x, dims, keepdim)
    if p == "nuc":
        raise NotImplementedError("the nuclear norm is not supported by gradlog")
    p = float(p)
    a = x.abs()
    if p == float("inf"):
        return amax(a, dims, keepdim)
    if p == float("-inf"):
        return amin(a, dims, keepdim)
    if p == 0:
        return (a != 0).to(x.dtype).sum(dims, keepdim)
    if p == 1:
        return a.sum(dims, keepdim)
    return (a ** p).sum(dims, keepdim) ** (1.0 / p)


class Prod(Op):
    node_name = "ProdBackward0"

    @staticmethod
    def forward(ctx, a, d, keepdim):
        ctx.d, ctx.keepdim, ctx.in_shape = d, keepdim, a.shape
        out = np.prod(a) if d is None else np.prod(a, axis=d, keepdims=keepdim)
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        d, shape = ctx.d, ctx.in_shape
        dims = tuple(range(len(shape))) if d is None else (d,)
        keepdim = ctx.keepdim and d is not None
        g = _expand_back(g, shape, dims, keepdim)
        if not (a._data == 0).any():
            return g * _expand_back(out, shape, dims, keepdim) / a, None, None
        if d is None:
            return g * _prod_of_others(a.reshape(-1), 0).reshape(shape), None, None
        return g * _prod_of_others(a, d), None, None


class ProdDim(Prod):
    node_name = "ProdBackward1"


def _prod_of_others(a: Tensor, d: int) -> Tensor:
    """For each element, the product of the other elements along ``d`` (exact with zeros, and
    differentiable: row i of an (n, n) stack is ``a`` with element i replaced by 1)."""
    shape = a._data.shape
    n = shape[d]
    rows = a.unsqueeze(d).expand(shape[:d] + (n,) + shape[d:])
    eye = np.eye(n, dtype=bool).reshape((1,) * d + (n, n) + (1,) * (len(shape) - d - 1))
    return rows.where(~eye, 1.0).prod(d + 1)


def prod(input: Tensor, dim: int | None = None, keepdim: bool = False, *,
         dtype: Any = None) -> Tensor:
    if dtype is not None:
        input = input.to(dtype)
    if dim is None:
        return Prod.apply(input, None, keepdim)
    return ProdDim.apply(input, _wrap_dim(dim, input._data.ndim), keepdim)


class Logsumexp(Op):
    node_name = "LogsumexpBackward0"

    @staticmethod
    def forward(ctx, a, dims, keepdim):
        m = np.max(a, axis=dims, keepdims=True, initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0).astype(a.dtype)  # shift by the max: no overflow
        with np.errstate(divide="ignore"):
            out = np.log(np.sum(np.exp(a - m), axis=dims, keepdims=True)) + m
        if not keepdim:
            out = np.squeeze(out, axis=dims)
        ctx.in_shape, ctx.dims, ctx.keepdim = a.shape, dims, keepdim
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        g = _expand_back(g, ctx.in_shape, ctx.dims, ctx.keepdim)
        return g * (a - _expand_back(out, ctx.in_shape, ctx.dims, ctx.keepdim)).exp(), None, None


def logsumexp(input: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``dim``, computed without overflow."""
    x = as_float(input)
    return Logsumexp.apply(x, normalize_dims(dim, x._data.ndim), keepdim)


def any(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    dims = None if dim is None else normalize_dims(dim, input._data.ndim)
    return wrap(np.asarray(np.any(input._data, axis=dims, keepdims=keepdim)))


def all(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    dims = None if dim is None else normalize_dims(dim, input._data.ndim)
    return wrap(np.asarray(np.all(input._data, axis=dims, keepdims=keepdim)))


def count_nonzero(input: Tensor, dim: Any = None) -> Tensor:
    dims = None if dim is None else normalize_dims(dim, input._data.ndim)
    return wrap(np.asarray(np.count_nonzero(input._data, axis=dims), dtype=np.int64))


TENSOR_METHODS = {
    "sum": sum, "mean": mean, "max": max, "min": min, "amax": amax, "amin": amin,
    "aminmax": aminmax, "argmax": argmax, "argmin": argmin, "norm": norm, "prod": prod,
    "logsumexp": logsumexp, "any": any, "all": all, "count_nonzero": count_nonzero,
    "nansum": nansum, "nanmean": nanmean,
}
