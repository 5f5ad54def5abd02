"""Regularization by noise: ``dropout`` zeroes each element with probability p and scales
the rest by 1/(1-p).

The mask comes from the default generator (or ``generator=``), so ``gl.manual_seed`` makes
a run reproducible.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.function import Op
from ...autograd.random import rng
from ...autograd.tensor import Tensor, array_of, wrap

__all__ = ["dropout"]


class Dropout(Op):
    """``x * mask`` for a constant (already scaled) mask; linear, so its own adjoint."""

    node_name = "NativeDropoutBackward0"

    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return Dropout.apply(g, array_of(mask)), None


def dropout_mask(shape: tuple, p: float, dtype: np.dtype, generator: Any = None) -> np.ndarray:
    """Bernoulli(1 - p) keep-mask already scaled by 1/(1 - p), in ``dtype``."""
    if p >= 1.0:
        return np.zeros(shape, dtype=dtype)
    keep = rng(generator).random(shape, dtype=np.float32) >= p
    mask = keep.astype(dtype)
    mask *= 1.0 / (1.0 - p)
    return mask


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False,
            *, generator: Any = None) -> Tensor:
    """Randomly zero elements during training (identity when ``training`` is False)."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    mask = dropout_mask(array_of(input).shape, p, array_of(input).dtype, generator)
    if inplace:
        return input.mul_(wrap(mask))
    return Dropout.apply(input, mask)
