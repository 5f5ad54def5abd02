"""Reductions of large arrays that plugins take on the training thread, on that thread alone.

NOTE: ``np.dot`` of float64 vectors goes to OpenBLAS, which splits a long one over its threads;
those threads then spin for a while after each call (measured here: a second core busy for
about 0.1 s after a 200,000-value dot), taking the core that torch's threads or gradlog's
writer's thread would use. These never call BLAS.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["sum_of_squares", "vector_norm", "all_finite"]

_PIECE = 1 << 16  # values converted to float64 at a time: 512 KiB, in the cache


def sum_of_squares(values: np.ndarray) -> float:
    """The sum of the squares of ``values``, accumulated in float64 (the float64 conversion
    done in cache-sized pieces, faster than one whole-array copy)."""
    flat = values.reshape(-1)
    if flat.dtype == np.float64 or flat.size <= _PIECE:
        wide = flat.astype(np.float64, copy=False)
        return float(np.einsum("i,i->", wide, wide))  # (einsum's own loop, not BLAS)
    buffer, total = np.empty(_PIECE), 0.0
    for start in range(0, flat.size, _PIECE):
        wide = buffer[:min(_PIECE, flat.size - start)]
        wide[...] = flat[start:start + _PIECE]
        total += float(np.einsum("i,i->", wide, wide))
    return total


def vector_norm(values: np.ndarray, p: float = 2.0) -> float:
    """The p-norm of all of ``values`` (``linalg.vector_norm``; inf: the largest absolute
    value), 0.0 for none."""
    flat = values.reshape(-1)
    if flat.size == 0:
        return 0.0
    if p == math.inf:
        return float(np.max(np.abs(flat)))
    if p == 2.0:
        return math.sqrt(sum_of_squares(flat))
    wide = np.abs(flat.astype(np.float64, copy=False))
    return float(np.sum(wide ** p) ** (1.0 / p))


def all_finite(values: np.ndarray) -> bool:
    """Whether no value is NaN or infinite: numpy's min and max propagate both, in two passes
    that cannot overflow."""
    if values.size == 0 or values.dtype.kind not in "fc":
        return True
    return bool(np.isfinite(values.min()) and np.isfinite(values.max()))
