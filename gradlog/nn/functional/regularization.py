"""Regularization by noise: ``dropout`` zeroes each element with probability p and scales
the rest by 1/(1-p).

The mask comes from the default generator (or ``generator=``), so ``gl.manual_seed`` makes
a run reproducible.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.ops.activation import MaskMul
from ...autograd.random import rng
from ...autograd.tensor import Tensor, array_of, wrap

__all__ = ["dropout"]


class Dropout(MaskMul):
    """``x * mask`` for a constant, already scaled mask: the one masked product
    (``MaskMul``) under PyTorch's node name for dropout."""

    node_name = "NativeDropoutBackward0"


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
