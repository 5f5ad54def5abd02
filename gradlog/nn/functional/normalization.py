"""Normalization: ``batch_norm``, ``layer_norm``, ``normalize``.

Both batch and layer norm standardize over some dimensions with statistics the caller
computes once in numpy (batch norm also needs them for its running averages), through one op
whose gradient is written with tensor ops. That gradient uses the op's own output and an
``Rstd`` op standing for 1/sqrt(var + eps) as a function of x, so it is exact to any order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.function import Op
from ...autograd.grad_mode import no_grad
from ...autograd.tensor import Tensor, array_of, wrap
from ._utils import shape_str

__all__ = ["batch_norm", "layer_norm", "normalize"]


class Rstd(Op):
    """1/sqrt(var(x) + eps) over ``dims`` (precomputed): lets gradients see it depend on x."""

    node_name = "RsqrtBackward0"

    @staticmethod
    def forward(ctx, x, rstd, dims):
        ctx.dims = dims
        ctx.save_for_backward(x, rstd)
        return rstd

    @staticmethod
    def backward(ctx, h):
        x, rstd = ctx.saved_tensors
        dims = ctx.dims
        m = int(np.prod([array_of(x).shape[d] for d in dims]))
        centered = x - x.mean(dims, keepdim=True)
        return h * rstd * rstd * rstd * centered * (-1.0 / m), None, None


class Standardize(Op):
    """(x - mean) * rstd over ``dims``, with ``mean`` and ``rstd`` given as arrays."""

    node_name = "NativeBatchNormBackward0"

    @staticmethod
    def forward(ctx, x, mean, rstd, dims):
        out = x - mean
        out *= rstd
        ctx.dims = dims
        ctx.save_for_backward(x, out, rstd)
        return out

    @staticmethod
    def backward(ctx, g):
        x, xhat, rstd = ctx.saved_tensors
        dims = ctx.dims
        rstd = Rstd.apply(x, array_of(rstd), dims)
        g_mean = g.mean(dims, keepdim=True)
        proj = (g * xhat).mean(dims, keepdim=True)
        return (g - g_mean - xhat * proj) * rstd, None, None, None


class LayerStandardize(Standardize):
    node_name = "NativeLayerNormBackward0"


def _moments(a: np.ndarray, dims: tuple, eps: float) -> tuple:
    """Mean, biased variance and 1/sqrt(var + eps) over ``dims`` (kept as size-1 dims)."""
    mean = a.mean(axis=dims, keepdims=True)
    centered = a - mean
    var = np.mean(centered * centered, axis=dims, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    return mean, var, rstd.astype(a.dtype, copy=False)


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple) -> Tensor:
    if weight is not None:
        y = y * (weight.reshape(shape) if array_of(weight).shape != shape else weight)
    if bias is not None:
        y = y + (bias.reshape(shape) if array_of(bias).shape != shape else bias)
    return y


def _check_channels(name: str, t: Tensor | None, c: int) -> None:
    if t is not None and array_of(t).size != c:
        raise RuntimeError(f"{name} should contain {c} elements not {array_of(t).size}")


def _update_running(running: Tensor | None, batch: np.ndarray, momentum: float) -> None:
    if running is not None:
        with no_grad():
            running.mul_(1.0 - momentum).add_(wrap(batch.reshape(array_of(running).shape)
                                                   .astype(array_of(running).dtype) * momentum))


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Standardize each channel (dim 1) over the batch and spatial dimensions, then scale and
    shift. Training uses the batch's statistics and moves the running ones towards them
    (the running variance is the unbiased one); evaluation uses the running statistics."""
    x = input
    if array_of(x).ndim < 2:
        raise ValueError(f"batch_norm expects an input with a channel dimension (N, C, ...), "
                         f"got input of size {shape_str(array_of(x).shape)}")
    c = array_of(x).shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        _check_channels(name, t, c)
    shape = (1, c) + (1,) * (array_of(x).ndim - 2)
    dims = (0,) + tuple(range(2, array_of(x).ndim))
    if training:
        n = array_of(x).size // c
        if n <= 1:
            raise ValueError("Expected more than 1 value per channel when training, got input "
                             f"size {x.shape!r}")
        mean, var, rstd = _moments(array_of(x), dims, eps)
        _update_running(running_mean, mean, momentum)
        _update_running(running_var, var * (n / (n - 1)), momentum)
        y = Standardize.apply(x, mean, rstd, dims)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("running_mean must be defined in evaluation mode")
        rstd = 1.0 / np.sqrt(array_of(running_var).reshape(shape) + eps)
        y = (x - running_mean.reshape(shape)) * wrap(rstd.astype(array_of(x).dtype, copy=False))
    return _affine(y, weight, bias, shape)


def layer_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Standardize over the last ``len(normalized_shape)`` dimensions, then scale and shift
    elementwise."""
    shape = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) \
        else tuple(int(s) for s in normalized_shape)
    x = input
    k = len(shape)
    if array_of(x).shape[array_of(x).ndim - k:] != shape or array_of(x).ndim < k:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(str(s) for s in shape)}], but got input of size"
                           f"{shape_str(array_of(x).shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and array_of(t).shape != shape:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but "
                               f"got {name} of shape {shape_str(array_of(t).shape)} and "
                               f"normalized_shape = {shape_str(shape)}")
    dims = tuple(range(array_of(x).ndim - k, array_of(x).ndim))
    mean, _, rstd = _moments(array_of(x), dims, eps)
    y = LayerStandardize.apply(x, mean, rstd, dims)
    return _affine(y, weight, bias, shape)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
              out: Any = None) -> Tensor:
    """``input / max(||input||_p, eps)`` along ``dim``."""
    if out is not None:
        raise TypeError("normalize(): the out= argument is not supported by gradlog")
    denom = input.norm(p, dim, keepdim=True).clamp(min=eps)
    return input / denom.expand_as(input)
