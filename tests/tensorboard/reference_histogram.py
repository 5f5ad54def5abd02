"""The oracle for the histogram tests: wave 1's exact histogram (sorted blocks kept whole,
counts by binary search of every edge), frozen as it was when the one-pass writer replaced it.
The writer's histograms must have the same buckets, bucket by bucket."""

from __future__ import annotations

import functools
import math

import numpy as np
from tensorboard.compat.proto.summary_pb2 import HistogramProto

_BLOCK = 1 << 17  # values per sorted block: 512 KiB of float32, 1 MiB of float64
_MAX_ESTIMATED_BINS = 10_000  # 'auto'/'fd' explode on outliers (tensorboardX#1)


@functools.cache
def tensorflow_edges() -> np.ndarray:
    """PyTorch's default edges, built the same way (repeated multiplication) for equal values."""
    value, positive = 1e-12, []
    while value < 1e20:
        positive.append(value)
        value *= 1.1
    return np.array([-v for v in reversed(positive)] + [0.0] + positive)


def _cuts(edges: np.ndarray, dtype) -> np.ndarray:
    """``edges`` in the values' dtype such that ``x < cut  <=>  x < edge`` for every value x."""
    cuts = edges.astype(dtype)
    if dtype != np.float64:  # the smallest float32 >= edge
        below = cuts.astype(np.float64) < edges
        cuts[below] = np.nextafter(cuts[below], np.inf)
    return cuts


def _add_below(below: np.ndarray, cuts: np.ndarray, block: np.ndarray) -> None:
    """``below[j] +=`` the number of values of the sorted ``block`` that are ``< cuts[j]``."""
    first, last = np.searchsorted(cuts, (block[0], block[-1]), side="right")
    below[first:last] += np.searchsorted(block, cuts[first:last], side="left")
    below[last:] += block.size


class _Sorted:
    """One pass over the values in sorted blocks: their count, sum, sum of squares, min, max and
    the number of non-finite values, and, for ``edges`` known in advance, how many values lie
    below each edge (``below``). Without ``edges`` (they depend on the min and max), the sorted
    blocks are kept for :meth:`below_cuts`; with them, one block-sized buffer is reused."""

    def __init__(self, values: np.ndarray, edges: np.ndarray | None = None) -> None:
        self.blocks: list[np.ndarray] = []
        self.count = self.nonfinite = 0
        self.sum = self.sum_squares = 0.0
        self.min, self.max = math.inf, -math.inf
        self.below: np.ndarray | None = None
        if edges is not None:
            cuts = _cuts(edges, values.dtype)
            self.below = np.zeros(len(edges), dtype=np.int64)
            buffer = np.empty(min(_BLOCK, values.size), dtype=values.dtype)
        for start in range(0, values.size, _BLOCK):
            chunk = values[start:start + _BLOCK]
            if edges is None:
                block = np.sort(chunk)
            else:
                block = buffer[:chunk.size]
                block[...] = chunk
                block.sort()
            low, high = 0, block.size
            if block[0] == -np.inf:
                low = int(np.searchsorted(block, -np.inf, side="right"))
            if not block[-1] < np.inf:  # +inf and NaN sort last
                high = int(np.searchsorted(block, np.inf, side="left"))
            self.nonfinite += block.size - (high - low)
            if low == high:
                continue
            finite = block[low:high]
            wide = finite.astype(np.float64, copy=False)  # PyTorch's sums are float64 too
            with np.errstate(over="ignore"):  # and may overflow, as there
                self.sum += float(np.add.reduce(wide))
                self.sum_squares += float(np.einsum("i,i->", wide, wide))
            self.min = min(self.min, float(finite[0]))
            self.max = max(self.max, float(finite[-1]))
            self.count += finite.size
            if edges is None:
                self.blocks.append(finite)
            else:
                _add_below(self.below, cuts, finite)

    def below_cuts(self, edges: np.ndarray) -> np.ndarray:
        """How many values lie below each of ``edges`` (from the kept blocks)."""
        cuts = _cuts(edges, self.blocks[0].dtype)
        below = np.zeros(len(cuts), dtype=np.int64)
        for block in self.blocks:
            _add_below(below, cuts, block)
        return below


def _estimated_bin_count(values: np.ndarray, rule: str, low: float, high: float) -> int:
    # numpy's formulas for 'fd' and 'auto', with the count capped: one outlier can make the
    # interquartile width tiny and ask numpy for billions of bins.
    n = values.size
    sturges = (high - low) / (math.log2(n) + 1.0)
    q75, q25 = np.percentile(values, [75, 25])
    fd = 2.0 * float(q75 - q25) * n ** (-1.0 / 3.0)
    width = fd if rule == "fd" else (min(fd, sturges) if fd else sturges)
    return math.ceil((high - low) / width) if width else 1


def _fixed_edges(bins) -> np.ndarray | None:
    """The edges of ``bins`` when they do not depend on the data, else None."""
    if isinstance(bins, str):
        return tensorflow_edges() if bins == "tensorflow" else None
    if np.ndim(bins) == 0:
        if int(bins) < 1:
            raise ValueError(f"bins must be at least 1, got {bins}")
        return None
    edges = np.asarray(bins, dtype=np.float64).ravel()
    if edges.size == 0 or np.any(np.diff(edges) <= 0):
        raise ValueError("bins must increase monotonically")
    return edges


def _data_edges(data: _Sorted, bins) -> np.ndarray:
    """Equal-width edges over ``[min, max]``: ``bins`` of them, or as many as a numpy rule
    (``"auto"``, ``"fd"``, ...) asks for."""
    low, high = data.min, data.max
    if not isinstance(bins, str):
        return np.linspace(low, high, int(bins) + 1)
    values = np.concatenate(data.blocks)
    if bins in ("auto", "fd"):
        count = _estimated_bin_count(values, bins, low, high)
    else:
        count = len(np.histogram_bin_edges(values, bins=bins, range=(low, high))) - 1
    return np.linspace(low, high, max(1, min(count, _MAX_ESTIMATED_BINS)) + 1)


def _subsampled(edges: np.ndarray, max_bins: int | None) -> np.ndarray:
    """PyTorch's ``max_bins`` rule, applied to all the bins before the empty ones are trimmed:
    with ``k = bins // max_bins``, every k neighbouring bins become one (the last group may be
    short), so there may be up to ``2 * max_bins - 1`` of them, as in PyTorch."""
    bins = len(edges) - 1
    if max_bins is None or bins <= max_bins:
        return edges
    return np.append(edges[:-1:bins // int(max_bins)], edges[-1])


def _merge(limits: np.ndarray, counts: np.ndarray, starts: np.ndarray):
    """Merge buckets into groups beginning at ``starts`` (sorted, starting with 0)."""
    ends = np.append(starts[1:], len(counts)) - 1
    return limits[ends], np.add.reduceat(counts, starts)


def _float32_distinct(low: float, limits: np.ndarray, counts: np.ndarray):
    """Drop inner edges that the loaders' float32 conversion would make non-increasing."""
    bounds = np.concatenate(([low], limits)).astype(np.float32)
    keep = bounds[1:-1] > bounds[:-2]
    keep &= bounds[1:-1] < bounds[-1]
    if keep.all():
        return limits, counts
    starts = np.concatenate(([0], np.flatnonzero(keep) + 1))
    return _merge(limits, counts, starts)


def _as_float(values: np.ndarray) -> np.ndarray:
    if values.dtype in (np.float32, np.float64):
        return values
    if values.dtype == np.float16:
        return values.astype(np.float32)
    if values.dtype.kind == "c":
        raise TypeError("cannot make a histogram of complex values")
    return values.astype(np.float64)  # ints and bools, as PyTorch does


def histogram_proto(values, bins="tensorflow", max_bins: int | None = None
                    ) -> tuple[HistogramProto | None, int]:
    """Histogram of the finite values, and how many values were not finite.

    Args:
        values: a numpy array (any shape, any real dtype).
        bins: ``"tensorflow"`` (PyTorch's default edges), a numpy estimator name (``"auto"``,
            ``"fd"``, ...), a number of equal-width bins, or a sequence of increasing edges.
            Values outside explicit edges go to the first or last bucket.
        max_bins: merge every ``len(bins) // max_bins`` neighbouring bins into one when there
            are more than ``max_bins`` (PyTorch's rule: the result may have more).

    Returns:
        ``(proto, nonfinite)``; ``proto`` is None when no value is finite.
    """
    array = np.asarray(values)
    if array.size == 0:
        raise ValueError("cannot make a histogram of an empty tensor")
    if max_bins is not None and int(max_bins) < 1:
        raise ValueError(f"max_bins must be at least 1, got {max_bins}")
    edges = _fixed_edges(bins)
    if edges is not None:
        edges = _subsampled(edges, max_bins)
    data = _Sorted(_as_float(array.ravel()), edges)
    if data.count == 0:
        return None, data.nonfinite
    low, high = data.min, data.max
    if np.float32(low) == np.float32(high):
        # NOTE: a zero-width bucket would be invisible; widen it, and more where +-0.5 rounds
        # away in float32.
        half = 0.5 if np.float32(low - 0.5) < np.float32(low + 0.5) else abs(low) * 2.0**-20
        low, high = low - half, high + half
        limits, counts = np.array([high]), np.array([data.count])
    else:
        if edges is None:
            edges = _subsampled(_data_edges(data, bins), max_bins)
        first = np.searchsorted(edges, low, side="right")  # edges[first:last] lie inside
        last = np.searchsorted(edges, high, side="left")
        inner = edges[first:last]
        below = data.below_cuts(inner) if data.below is None else data.below[first:last]
        limits = np.append(inner, high)
        counts = np.diff(np.concatenate(([0], below, [data.count])))
        limits, counts = _float32_distinct(low, limits, counts)
    proto = HistogramProto(min=low, max=high, num=data.count, sum=data.sum,
                           sum_squares=data.sum_squares, bucket_limit=limits.tolist(),
                           bucket=counts.tolist())
    return proto, data.nonfinite
