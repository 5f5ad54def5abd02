"""Activations as ``nn.functional`` exposes them: the engine's ops plus PyTorch's ``inplace``
flags. An in-place activation goes through the engine's in-place machinery (version counter,
graph rebase), so misuse on a leaf that requires grad raises as in PyTorch."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ...autograd.ops import activation as _act
from ...autograd.ops.inplace import apply_inplace
from ...autograd.tensor import Tensor

__all__ = ["relu", "relu_", "leaky_relu", "gelu", "sigmoid", "tanh", "softmax", "softmin",
           "log_softmax", "silu", "elu", "softplus", "logsigmoid", "hardtanh", "relu6"]

gelu = _act.gelu
sigmoid = _act.sigmoid
tanh = _act.tanh
softplus = _act.softplus
logsigmoid = _act.logsigmoid


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0); ``inplace=True`` overwrites ``input`` (``Tensor.relu_``)."""
    return input.relu_() if inplace else _act.relu(input)


def relu_(input: Tensor) -> Tensor:
    return input.relu_()


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, else ``negative_slope * x``."""
    if not inplace:
        return _act.leaky_relu(input, negative_slope)

    def fast(a: np.ndarray) -> None:
        np.multiply(a, negative_slope, out=a, where=a <= 0)
    return apply_inplace(input, fast, lambda t: _act.leaky_relu(t, negative_slope))


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    if inplace:
        return input.clamp_(min_val, max_val)
    return _act.hardtanh(input, min_val, max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, else ``alpha * (exp(x) - 1)``."""
    if not inplace:
        return _act.elu(input, alpha)

    def fast(a: np.ndarray) -> None:
        neg = a <= 0
        a[neg] = alpha * np.expm1(a[neg])
    return apply_inplace(input, fast, lambda t: _act.elu(t, alpha))


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(x)."""
    if not inplace:
        return _act.silu(input)

    def fast(a: np.ndarray) -> None:
        a *= _sigmoid_array(a)
    return apply_inplace(input, fast, _act.silu)


def _sigmoid_array(a: np.ndarray) -> np.ndarray:
    out = np.tanh(a * 0.5)
    out *= 0.5
    out += 0.5
    return out


def _implicit_dim_warning(name: str, dim: Any, stacklevel: int) -> None:
    if dim is None:
        warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the "
                      "call to include dim=X as an argument.", UserWarning,
                      stacklevel=stacklevel)


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype: Any = None) -> Tensor:
    """exp(x) / sum(exp(x)) along ``dim``, computed without overflow."""
    _implicit_dim_warning("softmax", dim, _stacklevel)
    return _act.softmax(input, dim, dtype=dtype)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype: Any = None) -> Tensor:
    """softmax(-x) along ``dim``."""
    _implicit_dim_warning("softmin", dim, _stacklevel)
    x = input if dtype is None else input.to(dtype)
    return _act.softmax(-x, dim)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype: Any = None) -> Tensor:
    """x - logsumexp(x) along ``dim``."""
    _implicit_dim_warning("log_softmax", dim, _stacklevel)
    return _act.log_softmax(input, dim, dtype=dtype)
