"""Regularization by noise: ``dropout`` zeroes each element with probability p and scales
the rest by 1/(1-p).

The mask comes from the default generator (or ``generator=``), so ``gl.manual_seed`` makes
a run reproducible. The product is the ordinary ``mul`` with the mask as a constant tensor,
as PyTorch computes dropout on the CPU: its node is ``MulBackward0``, the mask its second
input (``next_functions[1]`` is ``(None, 0)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.random import rng
from ...autograd.tensor import Tensor, array_of, wrap

__all__ = ["dropout"]


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
    if not training or p == 0.0 or input.numel() == 0:
        return input  # (the input itself, as PyTorch returns it)
    mask = dropout_mask(array_of(input).shape, p, array_of(input).dtype, generator)
    return input.mul_(wrap(mask)) if inplace else input * wrap(mask)
