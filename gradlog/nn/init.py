"""``nn.init``: fill parameters in place with PyTorch's initialization schemes.

Every function runs under ``no_grad`` (so it works on leaf parameters), draws from the
default generator unless ``generator=`` is given (``gl.manual_seed`` makes it reproducible),
and returns the tensor it filled.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ..autograd.grad_mode import no_grad
from ..autograd.random import rng
from ..autograd.tensor import Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_",
           "zeros_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
           "_calculate_fan_in_and_fan_out", "_calculate_correct_fan"]

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity: str, param: Any = None) -> float:
    """The recommended gain for a nonlinearity (sqrt(2) for ReLU, 5/3 for tanh, ...)."""
    if nonlinearity in _LINEAR:
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _fill(tensor: Tensor, values: np.ndarray | float) -> Tensor:
    """Write ``values`` into ``tensor`` with its own in-place ops (PyTorch's checks, the
    version bumped), without recording."""
    with no_grad():
        if isinstance(values, np.ndarray):
            tensor.copy_(values)
        else:
            tensor.fill_(values)
    return tensor


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
    """Fill with values drawn uniformly from [a, b)."""
    return _fill(tensor, rng(generator).uniform(a, b, tensor.shape))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    """Fill with values drawn from N(mean, std^2)."""
    return _fill(tensor, rng(generator).normal(mean, std, tensor.shape))


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator: Any = None) -> Tensor:
    """Fill with N(mean, std^2) restricted to [a, b] (redrawing values outside, which
    samples the truncated distribution exactly)."""
    if a >= b:
        raise ValueError(f"trunc_normal_: the lower bound a={a} must be below b={b}")
    gen = rng(generator)
    n = tensor.numel()
    out = gen.normal(mean, std, n)
    bad = (out < a) | (out > b)
    for _ in range(1000):
        if not bad.any():
            break
        out[bad] = gen.normal(mean, std, int(bad.sum()))
        bad = (out < a) | (out > b)
    np.clip(out, a, b, out=out)  # only reached when [a, b] holds almost no probability
    return _fill(tensor, out.reshape(tensor.shape))


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _fill(tensor, val)


def ones_(tensor: Tensor) -> Tensor:
    return _fill(tensor, 1)


def zeros_(tensor: Tensor) -> Tensor:
    return _fill(tensor, 0)


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out): dims 1 and 0 times the receptive field (the remaining dims)."""
    shape = tensor.shape
    if len(shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         f"dimensions (got shape {list(shape)})")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """Glorot normal: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float | None:
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", UserWarning, stacklevel=3)
        return None
    fan = _calculate_correct_fan(tensor, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator: Any = None) -> Tensor:
    """He uniform: U(-b, b) with b = gain * sqrt(3 / fan). Layers use ``a=sqrt(5)``, which
    gives b = 1 / sqrt(fan_in)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    if std is None:
        return tensor
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator: Any = None) -> Tensor:
    """He normal: N(0, std^2) with std = gain / sqrt(fan)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    if std is None:
        return tensor
    return normal_(tensor, 0.0, std, generator)
