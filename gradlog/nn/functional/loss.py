"""Regression and binary losses: ``mse_loss``, ``l1_loss``, ``binary_cross_entropy``,
``binary_cross_entropy_with_logits`` (cross-entropy and NLL live in classification.py).

Binary cross-entropy on logits is written with log-sigmoid, so logits of +-1e4 give finite
losses and gradients; on probabilities, the logs are clamped at -100 as in PyTorch.
"""

from __future__ import annotations

import warnings

import numpy as np

from ...autograd.function import Op
from ...autograd.ops.activation import logsigmoid
from ...autograd.tensor import Tensor, array_of
from ._utils import reduce_loss, reduction_of

__all__ = ["mse_loss", "l1_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits"]


def _warn_broadcast(input: Tensor, target: Tensor) -> None:
    if input.shape != target.shape:
        warnings.warn(f"Using a target size ({target.shape!r}) that is different to the input "
                      f"size ({input.shape!r}). This will likely lead to incorrect results due "
                      "to broadcasting. Please ensure they have the same size.", UserWarning,
                      stacklevel=3)


def _weighted(loss: Tensor, weight: Tensor | None, reduction: str) -> Tensor:
    """PyTorch's elementwise ``weight`` for mse/l1: the mean divides by the weights' sum."""
    if weight is None:
        return reduce_loss(loss, reduction)
    if weight.shape != loss.shape:
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    if reduction == "mean":
        return loss.sum() / weight.sum()
    return reduce_loss(loss, reduction)


def mse_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
             reduce: bool | None = None, reduction: str = "mean",
             weight: Tensor | None = None) -> Tensor:
    """Squared error (input - target)^2, averaged by default."""
    _warn_broadcast(input, target)
    reduction = reduction_of(size_average, reduce, reduction)
    diff = input - target
    return _weighted(diff * diff, weight, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
            reduce: bool | None = None, reduction: str = "mean",
            weight: Tensor | None = None) -> Tensor:
    """Absolute error |input - target|, averaged by default."""
    _warn_broadcast(input, target)
    reduction = reduction_of(size_average, reduce, reduction)
    return _weighted((input - target).abs(), weight, reduction)


def _clamped_log(a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(a), -100.0).astype(a.dtype, copy=False)


class BinaryCrossEntropy(Op):
    """-(y log p + (1 - y) log(1 - p)) with each log clamped at -100."""

    node_name = "BinaryCrossEntropyBackward0"

    @staticmethod
    def forward(ctx, p, y):
        ctx.save_for_backward(p, y)
        return -(y * _clamped_log(p) + (1 - y) * _clamped_log(1 - p))

    @staticmethod
    def backward(ctx, g):
        p, y = ctx.saved_tensors
        np_, ny = ctx.needs_input_grad
        gp = gy = None
        if np_:
            gp = g * (p - y) / ((1 - p) * p).clamp(min=1e-12)
        if ny:
            gy = g * ((1 - p).log().clamp(min=-100.0) - p.log().clamp(min=-100.0))
        return gp, gy


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Tensor:
    """Binary cross-entropy between probabilities ``input`` in [0, 1] and ``target``."""
    reduction = reduction_of(size_average, reduce, reduction)
    if target.shape != input.shape:
        raise ValueError(f"Using a target size ({target.shape!r}) that is different to the input "
                         f"size ({input.shape!r}) is deprecated. Please ensure they have the "
                         "same size.")
    p = array_of(input)
    if p.size and (p.min() < 0 or p.max() > 1):
        bad = float(p.min()) if p.min() < 0 else float(p.max())
        raise RuntimeError(f"all elements of input should be between 0 and 1 (found {bad})")
    loss = BinaryCrossEntropy.apply(input, target)
    if weight is not None:
        loss = loss * weight
    return reduce_loss(loss, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor,
                                     weight: Tensor | None = None,
                                     size_average: bool | None = None,
                                     reduce: bool | None = None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """Sigmoid and binary cross-entropy in one numerically stable expression:
    ``(1 - y) x - (1 + (pos_weight - 1) y) log sigmoid(x)``."""
    reduction = reduction_of(size_average, reduce, reduction)
    if target.shape != input.shape:
        raise ValueError(f"Target size ({target.shape!r}) must be the same as input size "
                         f"({input.shape!r})")
    log_sig = logsigmoid(input)
    if pos_weight is not None:
        loss = (1 - target) * input - (1 + (pos_weight - 1) * target) * log_sig
    else:
        loss = (1 - target) * input - log_sig
    if weight is not None:
        loss = loss * weight
    return reduce_loss(loss, reduction)
