"""Reductions of large arrays that plugins take on the training thread, on that thread alone.

NOTE: ``np.dot`` of float64 vectors goes to OpenBLAS, which splits a long one over its threads;
those threads then spin for a while after each call (measured here: a second core busy for
about 0.1 s after a 200,000-value dot), taking the core that torch's threads or gradlog's
writer's thread would use. These never call BLAS.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = ["sum_of_squares", "vector_norm", "all_finite", "ValueSummary", "value_summary"]

_PIECE = 1 << 16  # values converted to float64 at a time: 512 KiB, in the cache


def sum_of_squares(values: np.ndarray, subtract: np.ndarray | None = None) -> float:
    """The sum of the squares of ``values`` (of ``values - subtract``, the differences exact),
    accumulated in float64 (the float64 conversion done in cache-sized pieces, faster than
    one whole-array copy)."""
    flat = values.reshape(-1)
    other = None if subtract is None else subtract.reshape(-1)
    if other is None and (flat.dtype == np.float64 or flat.size <= _PIECE):
        wide = flat.astype(np.float64, copy=False)
        return float(np.einsum("i,i->", wide, wide))  # (einsum's own loop, not BLAS)
    buffer, total = np.empty(min(_PIECE, flat.size)), 0.0
    for start in range(0, flat.size, _PIECE):
        wide = buffer[:min(_PIECE, flat.size - start)]
        wide[...] = flat[start:start + _PIECE]
        if other is not None:
            wide -= other[start:start + _PIECE]  # (in float64: exact for float32 values)
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
    """Whether no value is NaN or infinite: one pass, their sum (a NaN or an infinity makes it
    NaN or infinite), and value by value only when the sum is not finite (large finite values
    may overflow it)."""
    if values.size == 0 or values.dtype.kind not in "fc":
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(values, axis=None)
    return bool(np.isfinite(total)) or bool(np.isfinite(values).all())


class ValueSummary(NamedTuple):
    """What activation statistics need of a tensor: the mean and population std of its values,
    the fraction of them outside ``bounds`` (nan when no bounds were given), and the fraction
    of its units (axis 1: channels of a conv output, features of a linear one) that are <= 0
    for every example and position (dead, after a rectifier)."""

    mean: float
    std: float
    outside: float
    dead_units: float


def value_summary(values: np.ndarray, bounds: tuple[float, float] | None = None
                  ) -> ValueSummary:
    """:class:`ValueSummary` of an array, in float64 (the reference every engine equals)."""
    values = np.asarray(values)
    if values.size == 0:
        return ValueSummary(0.0, 0.0, math.nan if bounds is None else 0.0, 0.0)
    outside = math.nan
    if bounds is not None:
        outside = float(np.mean((values < bounds[0]) | (values > bounds[1])))
    units = values.reshape(values.shape[0], values.shape[1], -1) if values.ndim >= 2 else \
        values.reshape(1, 1, -1)
    # (a unit is dead when its largest value is <= 0; a NaN keeps it alive, as in
    # all(units <= 0))
    dead = np.max(units, axis=(0, 2)) <= 0
    # two passes in float64 in one copy of the values, centred in place (numpy's std makes
    # two more whole-array temporaries)
    centred = np.array(values, dtype=np.float64).reshape(-1)
    mean = float(centred.mean())
    centred -= mean
    std = math.sqrt(float(np.einsum("i,i->", centred, centred)) / centred.size)  # (not BLAS)
    return ValueSummary(mean, std, outside, float(dead.mean()))  # (a unit at least: not empty)
