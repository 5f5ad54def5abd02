"""Activations: relu, leaky_relu, sigmoid, tanh, gelu, softplus, elu, silu, softmax,
log_softmax. Backward formulas use tensor ops, so double backward works through them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..function import Op
from ..tensor import Tensor, _wrap_dim
from ._util import as_float
from .unary import _erf_array

__all__ = ["relu", "leaky_relu", "sigmoid", "tanh", "gelu", "softplus", "elu", "silu",
           "softmax", "log_softmax", "logsigmoid", "hardtanh", "relu6"]


class MaskMul(Op):
    """``g * mask`` for a constant mask (the derivative of piecewise-linear activations)."""

    node_name = "ThresholdBackwardBackward0"

    @staticmethod
    def forward(ctx, g, mask):
        ctx.save_for_backward(mask)
        return g * mask

    @staticmethod
    def backward(ctx, gg):
        (mask,) = ctx.saved_tensors
        return MaskMul.apply(gg, mask._data), None


def _relu(a):
    return np.maximum(a, 0)


class Relu(Op):
    node_name = "ReluBackward0"

    @staticmethod
    def forward(ctx, a):
        out = _relu(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return MaskMul.apply(g, out._data > 0)


class LeakyRelu(Op):
    node_name = "LeakyReluBackward0"

    @staticmethod
    def forward(ctx, a, slope):
        pos = a > 0
        ctx.save_for_backward(np.where(pos, 1.0, slope).astype(a.dtype))
        return np.where(pos, a, a * slope)

    @staticmethod
    def backward(ctx, g):
        (factor,) = ctx.saved_tensors
        return MaskMul.apply(g, factor._data), None


class Hardtanh(Op):
    node_name = "HardtanhBackward0"

    @staticmethod
    def forward(ctx, a, lo, hi):
        ctx.save_for_backward((a > lo) & (a < hi))
        return np.clip(a, lo, hi)

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return MaskMul.apply(g, mask._data), None, None


def _sigmoid(a: np.ndarray) -> np.ndarray:
    out = np.tanh(a * 0.5)
    out *= 0.5
    out += 0.5  # 0.5 * (1 + tanh(x / 2)): no overflow for large |x|
    return out


class Sigmoid(Op):
    node_name = "SigmoidBackward0"

    @staticmethod
    def forward(ctx, a):
        out = _sigmoid(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out * (1 - out)


class Tanh(Op):
    node_name = "TanhBackward0"

    @staticmethod
    def forward(ctx, a):
        out = np.tanh(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * (1 - out * out)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


class Gelu(Op):
    node_name = "GeluBackward0"

    @staticmethod
    def forward(ctx, a, approximate):
        ctx.save_for_backward(a)
        ctx.approximate = approximate
        if approximate == "tanh":
            return 0.5 * a * (1 + np.tanh(_SQRT_2_OVER_PI * (a + 0.044715 * a ** 3)))
        return (0.5 * a * (1 + _erf_array(a * _INV_SQRT_2))).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if ctx.approximate == "tanh":
            inner = (x + x ** 3 * 0.044715) * _SQRT_2_OVER_PI
            t = inner.tanh()
            dinner = (x * x * (3 * 0.044715) + 1) * _SQRT_2_OVER_PI
            return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * dinner), None
        cdf = ((x * _INV_SQRT_2).erf() + 1) * 0.5
        pdf = (x * x * -0.5).exp() * _INV_SQRT_2PI
        return g * (cdf + x * pdf), None


class Softmax(Op):
    node_name = "SoftmaxBackward0"

    @staticmethod
    def forward(ctx, a, d):
        e = np.exp(a - np.max(a, axis=d, keepdims=True))
        e /= np.sum(e, axis=d, keepdims=True)
        ctx.d = d
        ctx.save_for_backward(e)
        return e

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        d = ctx.d
        return out * (g - (g * out).sum(d, keepdim=True)), None


class LogSoftmax(Op):
    node_name = "LogSoftmaxBackward0"

    @staticmethod
    def forward(ctx, a, d):
        shifted = a - np.max(a, axis=d, keepdims=True)
        out = shifted - np.log(np.sum(np.exp(shifted), axis=d, keepdims=True))
        ctx.d = d
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        d = ctx.d
        return g - out.exp() * g.sum(d, keepdim=True), None


def _softmax_dim(input: Tensor, dim: Any) -> int:
    if dim is None:  # PyTorch's legacy implicit choice
        dim = 0 if input._data.ndim in (0, 1, 3) else 1
    return _wrap_dim(dim, input._data.ndim) if input._data.ndim else 0


def relu(input: Tensor) -> Tensor:
    return Relu.apply(input)


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return LeakyRelu.apply(input, negative_slope)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return Hardtanh.apply(input, min_val, max_val)


def relu6(input: Tensor) -> Tensor:
    return hardtanh(input, 0.0, 6.0)


def sigmoid(input: Tensor) -> Tensor:
    return Sigmoid.apply(as_float(input))


def tanh(input: Tensor) -> Tensor:
    return Tanh.apply(as_float(input))


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got "
                           f"'{approximate}'")
    return Gelu.apply(input, approximate)


class Softplus(Op):
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``."""

    node_name = "SoftplusBackward0"

    @staticmethod
    def forward(ctx, a, beta, threshold):
        bx = a * beta
        linear = bx > threshold
        with np.errstate(over="ignore"):
            soft = np.log1p(np.exp(np.minimum(bx, threshold))) / beta
        ctx.save_for_backward(a, linear)
        ctx.beta = beta
        return np.where(linear, a, soft).astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        a, linear = ctx.saved_tensors
        slope = (a * ctx.beta).sigmoid()
        if linear._data.any():
            slope = slope.where(~linear._data, 1.0)
        return g * slope, None, None


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``."""
    return Softplus.apply(as_float(input), beta, threshold)


class Elu(Op):
    node_name = "EluBackward0"

    @staticmethod
    def forward(ctx, a, alpha):
        pos = a > 0
        out = np.where(pos, a, alpha * np.expm1(np.minimum(a, 0))).astype(a.dtype, copy=False)
        ctx.save_for_backward(a, pos)
        ctx.alpha = alpha
        return out

    @staticmethod
    def backward(ctx, g):
        a, pos = ctx.saved_tensors
        slope = (a.clamp(max=0.0).exp() * ctx.alpha).where(~pos._data, 1.0)
        return g * slope, None


def elu(input: Tensor, alpha: float = 1.0) -> Tensor:
    return Elu.apply(as_float(input), alpha)


class Silu(Op):
    """``x * sigmoid(x)``."""

    node_name = "SiluBackward0"

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * _sigmoid(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        s = a.sigmoid()
        return g * (s * (1 + a * (1 - s)))


def silu(input: Tensor) -> Tensor:
    return Silu.apply(as_float(input))


class LogSigmoid(Op):
    """``log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))``: exact for large |x| of either sign."""

    node_name = "LogSigmoidBackward0"

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.minimum(a, 0) - np.log1p(np.exp(-np.abs(a)))

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * (-a).sigmoid()


def logsigmoid(input: Tensor) -> Tensor:
    return LogSigmoid.apply(as_float(input))


def softmax(input: Tensor, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    x = as_float(input if dtype is None else input.to(dtype))
    return Softmax.apply(x, _softmax_dim(x, dim))


def log_softmax(input: Tensor, dim: Any = None, _stacklevel: int = 3,
                dtype: Any = None) -> Tensor:
    x = as_float(input if dtype is None else input.to(dtype))
    return LogSoftmax.apply(x, _softmax_dim(x, dim))


TENSOR_METHODS = {
    "relu": relu, "sigmoid": sigmoid, "tanh": tanh, "softmax": softmax,
    "log_softmax": log_softmax,
}
