"""Cumulative operations along one dimension: cumsum, cumprod, logcumsumexp."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..function import Op
from ..tensor import Tensor, _wrap_dim
from ._util import as_float
from .reduction import _sum_dtype

__all__ = ["cumsum", "cumprod", "logcumsumexp"]


def _reverse_cumsum(g: Tensor, d: int) -> Tensor:
    """``out[i] = sum of g[j] for j >= i`` along ``d`` (the adjoint of cumsum)."""
    return g.flip(d).cumsum(d).flip(d)


class Cumsum(Op):
    node_name = "CumsumBackward0"

    @staticmethod
    def forward(ctx, a, d, np_dtype):
        ctx.d = d
        return np.cumsum(a, axis=d, dtype=np_dtype)

    @staticmethod
    def backward(ctx, g):
        return _reverse_cumsum(g, ctx.d), None, None


def cumsum(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    d = _wrap_dim(dim, input._data.ndim)
    if input._data.ndim == 0:
        return input.clone()
    return Cumsum.apply(input, d, _sum_dtype(input._data, dtype))


class Cumprod(Op):
    node_name = "CumprodBackward0"

    @staticmethod
    def forward(ctx, a, d):
        out = np.cumprod(a, axis=d)
        ctx.d = d
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        d = ctx.d
        if not (a._data == 0).any():
            return _reverse_cumsum(g * out, d) / a, None
        return _cumprod_grad_with_zeros(a, g, d), None


def _cumprod_grad_with_zeros(a: Tensor, g: Tensor, d: int) -> Tensor:
    """d/da_i of sum_j g_j prod_{k<=j} a_k, exact where elements are 0: row i of an (n, n)
    stack is ``a`` with a_i replaced by 1, its cumulative product gives prod_{k<=j, k!=i} a_k,
    and only j >= i counts (tensor ops: differentiable)."""
    a, g = a.movedim(d, -1), g.movedim(d, -1)
    n = a._data.shape[-1]
    eye = np.eye(n, dtype=bool)
    rows = a.unsqueeze(-2).expand(a._data.shape[:-1] + (n, n)).where(~eye, 1.0).cumprod(-1)
    upper = np.triu(np.ones((n, n), dtype=a._data.dtype))  # [i, j]: j >= i
    grad = (rows * g.unsqueeze(-2) * upper).sum(-1)
    return grad.movedim(-1, d)


def cumprod(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    if dtype is not None:
        input = input.to(dtype)
    d = _wrap_dim(dim, input._data.ndim)
    if input._data.ndim == 0:
        return input.clone()
    return Cumprod.apply(input, d)


class Logcumsumexp(Op):
    node_name = "LogcumsumexpBackward0"

    @staticmethod
    def forward(ctx, a, d):
        out = np.logaddexp.accumulate(a, axis=d)
        ctx.d = d
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        return _reverse_cumsum(g * (-out).exp(), ctx.d) * a.exp(), None


def logcumsumexp(input: Tensor, dim: int) -> Tensor:
    """``log(cumsum(exp(x)))`` along ``dim``, computed without overflow."""
    x = as_float(input)
    d = _wrap_dim(dim, x._data.ndim)
    if x._data.ndim == 0:
        return x.clone()
    return Logcumsumexp.apply(x, d)


TENSOR_METHODS = {"cumsum": cumsum, "cumprod": cumprod, "logcumsumexp": logcumsumexp}
