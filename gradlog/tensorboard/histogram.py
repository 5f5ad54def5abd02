"""Histograms as PyTorch writes them (legacy ``HistogramProto``), computed fast and displayed
right by both TensorBoard loaders.

The buckets are the bins' edges that lie strictly inside ``(min, max)`` of the finite values,
with ``min`` as the first left edge and ``max`` as the last right edge. So the first and the last
bucket hold the min and the max: there are no empty edge buckets, no zero-width or inverted
buckets (also after the float32 rounding the loaders apply), and the counts add up to the number
of finite values, which are all counted, whatever the bins. Non-finite values are left out and
counted separately (the writer logs the count as ``<tag>/nonfinite``). A constant tensor becomes
the one bucket ``[v - 0.5, v + 0.5]``. Default bins are ``"tensorflow"``: PyTorch's 1549 edges
``+-1e-12 * 1.1**k`` and 0; a bucket ``[a, b)`` holds ``a <= x < b``, as in ``np.histogram``.

How: one min/max pass gives the range (and tells whether anything is not finite), which fixes
the edges that matter, those inside it, also for data-dependent bins (an int; numpy's rules,
whose percentiles come from a partition). Then the values pass through one reused, cache-sized
buffer, where each block is sorted (numpy's sort is vectorized and releases the GIL) and each
inner edge is binary-searched in it. The counts are exact for any edges.

NOTE, measured on the development machine (AVX-512, numpy 2.4, float32, 64K-value blocks): the
sorted block costs ~2 ns per value; a sort-free pass (bucket index from the float's bits or by
arithmetic, then ``np.add.at``) costs the same on normal data and ~1.8x more on ReLU outputs,
where the many zeros make every increment wait for the previous one. Building the proto from
Python lists cost more than both (~50 us per 600 buckets), hence :func:`_encoded`.
"""

from __future__ import annotations

import functools
import math
import struct
import threading
from typing import NamedTuple

import numpy as np
from tensorboard.compat.proto.summary_pb2 import HistogramProto

__all__ = ["histogram_proto", "histogram_counts", "counts_proto", "HistogramCounts", "cuts",
           "fixed_edges", "is_constant", "tensorflow_edges", "check_arguments"]

_BLOCK = 1 << 16  # values per sorted block: 256 KiB of float32, 512 KiB of float64
_SMALL = 4096  # up to this many values are sorted at once, without the reused buffers
_MAX_ESTIMATED_BINS = 10_000  # 'auto'/'fd' explode on outliers (tensorboardX#1)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@functools.cache
def tensorflow_edges() -> np.ndarray:
    """PyTorch's default edges, built the same way (repeated multiplication) for equal values."""
    value, positive = 1e-12, []
    while value < 1e20:
        positive.append(value)
        value *= 1.1
    return np.array([-v for v in reversed(positive)] + [0.0] + positive)


class _Buffers(threading.local):
    """One block-sized sort buffer per thread and dtype, reused by every call."""

    def get(self, dtype: np.dtype) -> np.ndarray:
        buffer = self.__dict__.get(dtype)
        if buffer is None:
            buffer = self.__dict__[dtype] = np.empty(_BLOCK, dtype)
        return buffer


_buffers = _Buffers()


def _cuts(edges: np.ndarray, dtype) -> np.ndarray:
    """``edges`` in the values' dtype such that ``x < cut  <=>  x < edge`` for every value x."""
    cuts = edges.astype(dtype)
    if dtype != np.float64:  # the smallest float32 >= edge
        below = cuts.astype(np.float64) < edges
        cuts[below] = np.nextafter(cuts[below], np.inf)
    return cuts


def _one_pass(values: np.ndarray, cuts: np.ndarray, own: bool = False
              ) -> tuple[np.ndarray, float, float]:
    """How many of ``values`` lie below each of the increasing ``cuts`` (see :func:`_cuts`),
    and their sum and sum of squares in float64 (as PyTorch takes them), block by block:
    seven numpy calls a block, the sort the only costly one. ``own``: ``values`` (contiguous)
    belong to this call, and each block is sorted where it is instead of in the thread's
    buffer."""
    if values.size <= _SMALL:  # the same, in fewer numpy calls
        if len(cuts):
            block = values if own else values.copy()
            block.sort()
        else:
            block = values
        wide = block.astype(np.float64)
        # (np.dot: a BLAS call, single-threaded at this size, one pass instead of two)
        return block.searchsorted(cuts), float(np.add.reduce(wide)), float(np.dot(wide, wide))
    below = np.zeros(len(cuts), dtype=np.int64)
    block_buffer, wide_buffer = _buffers.get(values.dtype), _buffers.get(np.dtype(np.float64))
    total = squares = 0.0
    for start in range(0, values.size, _BLOCK):
        chunk = values[start:start + _BLOCK]
        wide = wide_buffer[:chunk.size]
        if len(cuts):
            if own:
                block = chunk
            else:
                block = block_buffer[:chunk.size]
                block[...] = chunk
            block.sort()
            below += block.searchsorted(cuts)
            chunk = block
        wide[...] = chunk
        total += np.add.reduce(wide)
        # (einsum's own loop: one pass, no product array; not np.dot: OpenBLAS spreads a dot
        # of this size over its threads, which would compete with the training thread)
        squares += np.einsum("i,i->", wide, wide)
    return below, float(total), float(squares)


@functools.lru_cache(maxsize=8)
def _tensorflow_cuts(dtype: np.dtype, max_bins: int | None) -> tuple[np.ndarray, np.ndarray]:
    edges = _subsampled(tensorflow_edges(), max_bins)
    return edges, _cuts(edges, dtype)


def _edges_and_cuts(bins, max_bins, finite: np.ndarray, low: float, high: float):
    """The (``max_bins``-subsampled) edges, their cuts for ``finite``'s dtype, and whether
    the edges are known to stay distinct in float32 (PyTorch's default ones: 10% apart)."""
    if type(bins) is str and bins == "tensorflow":
        max_bins = None if max_bins is None else int(max_bins)
        return (*_tensorflow_cuts(finite.dtype, max_bins), True)
    edges = _fixed_edges(bins)
    if edges is None:
        edges = _data_edges(finite, bins, low, high)
    edges = _subsampled(edges, max_bins)
    return edges, _cuts(edges, finite.dtype), False


def _finite(values: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The finite values (``values`` itself when all are), their min and their max."""
    low, high = float(values.min()), float(values.max())  # NaN propagates; so do +-inf
    if not (math.isfinite(low) and math.isfinite(high)):
        values = values[np.isfinite(values)]
        if values.size == 0:
            return values, math.nan, math.nan
        low, high = float(values.min()), float(values.max())
    return values, low, high


def _passed(finite: np.ndarray, cuts: np.ndarray, low: float, high: float,
            own: bool = False):
    """:func:`_one_pass`; where squares may overflow float64 (as PyTorch's do), quietly."""
    if max(abs(low), abs(high)) < 1e140:
        return _one_pass(finite, cuts, own)
    with np.errstate(over="ignore", invalid="ignore"):
        return _one_pass(finite, cuts, own)


def _estimated_bin_count(values: np.ndarray, rule: str, low: float, high: float) -> int:
    # numpy's formulas for 'fd' and 'auto', with the count capped: one outlier can make the
    # interquartile width tiny and ask numpy for billions of bins.
    n = values.size
    sturges = (high - low) / (math.log2(n) + 1.0)
    q75, q25 = np.percentile(values, [75, 25])  # a partition, not a sort
    fd = 2.0 * float(q75 - q25) * n ** (-1.0 / 3.0)
    width = fd if rule == "fd" else (min(fd, sturges) if fd else sturges)
    if not width:
        return 1
    count = (high - low) / width  # inf for a subnormal width: more than the cap
    return math.ceil(count) if count < _MAX_ESTIMATED_BINS else _MAX_ESTIMATED_BINS


def _data_edges(values: np.ndarray, bins, low: float, high: float) -> np.ndarray:
    """Equal-width edges over ``[low, high]``: ``bins`` of them, or as many as a numpy rule
    (``"auto"``, ``"fd"``, ...) asks for."""
    with np.errstate(over="ignore", invalid="ignore"):  # (statistics of huge values)
        if not isinstance(bins, str):
            return np.linspace(low, high, int(bins) + 1)
        if bins in ("auto", "fd"):
            count = _estimated_bin_count(values, bins, low, high)
        else:
            count = _rule_bin_count(values, bins, low, high)
        return np.linspace(low, high, max(1, min(count, _MAX_ESTIMATED_BINS)) + 1)


def _rule_bin_count(values: np.ndarray, rule: str, low: float, high: float) -> int:
    # NOTE: numpy refuses ranges of a few subnormal float32 values ("Too many bins for data
    # range"); in float64 they are ordinary, and a histogram must not fail on finite data.
    for data in (values, values.astype(np.float64)):
        try:
            return len(np.histogram_bin_edges(data, bins=rule, range=(low, high))) - 1
        except ValueError:
            continue
    return 1


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


def _float32_distinct(low: float, limits: np.ndarray, counts: np.ndarray,
                      inner_distinct: bool = False):
    """Drop inner edges that the loaders' float32 conversion would make non-increasing
    (``inner_distinct``: only the first and last inner edge can, next to min and max)."""
    if len(limits) == 1:
        return limits, counts
    if inner_distinct and abs(low) < _FLOAT32_MAX and abs(limits[-1]) < _FLOAT32_MAX and (
            np.float32(limits[0]) > np.float32(low)
            and np.float32(limits[-2]) < np.float32(limits[-1])):
        return limits, counts
    with np.errstate(over="ignore"):  # beyond float32's range the loaders see +-inf too
        bounds = np.concatenate(([np.float32(low)], limits.astype(np.float32)))
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
    return values.astype(np.float64)  # ints and bools, as PyTorch does


def check_arguments(values: np.ndarray, bins="tensorflow", max_bins: int | None = None) -> None:
    """Raise the error :func:`histogram_proto` would raise for these arguments (what a caller
    checks before handing the work to another thread)."""
    if values.size == 0:
        raise ValueError("cannot make a histogram of an empty tensor")
    if values.dtype.kind == "c":
        raise TypeError("cannot make a histogram of complex values")
    if max_bins is not None and int(max_bins) < 1:
        raise ValueError(f"max_bins must be at least 1, got {max_bins}")
    if not (type(bins) is str and bins == "tensorflow"):
        _fixed_edges(bins)


def _packed_doubles(field: int, values: np.ndarray) -> bytes:
    data = np.asarray(values, dtype="<f8").tobytes()
    size, length = len(data), bytearray()
    while size > 0x7F:  # varint
        length.append(size & 0x7F | 0x80)
        size >>= 7
    length.append(size)
    return bytes((field << 3 | 2,)) + bytes(length) + data


_HEAD = struct.Struct("<BdBdBdBdBd")


def _encoded(low, high, num, total, squares, limits, counts) -> HistogramProto:
    """The ``HistogramProto``, parsed from its protobuf wire form (fields 1-5 doubles, 6 and 7
    packed doubles): from Python lists it took ~50 us for 600 buckets, from numpy bytes ~2."""
    head = _HEAD.pack(0x09, low, 0x11, high, 0x19, num, 0x21, total, 0x29, squares)
    return HistogramProto.FromString(head + _packed_doubles(6, limits)
                                     + _packed_doubles(7, counts))


class HistogramCounts(NamedTuple):
    """What a histogram needs from the values, and nothing more: what an engine computes where
    the tensor lives and hands to the writer (a few hundred numbers, never the values).

    ``low``/``high`` are the finite values' min and max, ``num`` their count, ``total`` and
    ``squares`` their sum and sum of squares (float64), ``nonfinite`` the count of NaN and
    +-inf. ``edges`` are the bins' edges (increasing; those outside ``(low, high)`` are ignored)
    and ``below[i]`` how many finite values are ``< edges[i]``; ``distinct`` says the edges are
    PyTorch's default ones (10% apart, so distinct in float32)."""

    low: float
    high: float
    num: int
    nonfinite: int
    total: float
    squares: float
    edges: np.ndarray
    below: np.ndarray
    distinct: bool = False


def cuts(edges: np.ndarray, dtype) -> np.ndarray:
    """``edges`` in the values' dtype (float32 or float64) such that ``x < cut <=> x < edge``
    for every value ``x`` of that dtype: counting below the cuts counts below the edges."""
    return _cuts(np.asarray(edges, dtype=np.float64), np.dtype(dtype))


def is_constant(low: float, high: float) -> bool:
    """Whether the finite values make one bucket (equal once rounded to float32, as the
    loaders read them)."""
    if abs(low) < _FLOAT32_MAX and abs(high) < _FLOAT32_MAX:
        return bool(np.float32(low) == np.float32(high))
    with np.errstate(over="ignore"):  # (beyond float32's range both are +-inf)
        return bool(np.float32(low) == np.float32(high))


def fixed_edges(bins, max_bins: int | None = None) -> tuple[np.ndarray, bool] | None:
    """The (``max_bins``-subsampled) edges of ``bins`` when they do not depend on the data,
    and whether they are PyTorch's default ones; None for a bin count or a numpy rule."""
    if type(bins) is str and bins == "tensorflow":
        return _subsampled(tensorflow_edges(), None if max_bins is None else int(max_bins)), True
    edges = _fixed_edges(bins)
    return None if edges is None else (_subsampled(edges, max_bins), False)


def histogram_counts(values, bins="tensorflow", max_bins: int | None = None, *,
                     scratch: bool = False) -> HistogramCounts:
    """:class:`HistogramCounts` of a numpy array (any shape, any real dtype), computed with
    numpy: the edges that matter are those inside the finite values' range, and only those are
    counted (see the module's docstring). ``scratch``: ``values`` is the caller's own copy,
    made for this call and read by nothing after it, which the counting may reorder (it sorts
    it in place instead of copying it block by block)."""
    array = np.asarray(values)
    check_arguments(array, bins, max_bins)
    flat = _as_float(array.ravel())
    finite, low, high = _finite(flat)
    nonfinite = flat.size - finite.size
    nothing = np.empty(0)
    if finite.size == 0:
        return HistogramCounts(low, high, 0, nonfinite, 0.0, 0.0, nothing, nothing)
    if is_constant(low, high):
        _, total, squares = _passed(finite, nothing, low, high)
        return HistogramCounts(low, high, finite.size, nonfinite, total, squares, nothing,
                               nothing)
    edges, cut_values, distinct = _edges_and_cuts(bins, max_bins, finite, low, high)
    first = edges.searchsorted(low, side="right")  # edges[first:last] lie inside
    last = edges.searchsorted(high, side="left")
    # (values converted or filtered above are this call's own too)
    own = (scratch or not np.may_share_memory(finite, array)) and finite.flags.writeable
    below, total, squares = _passed(finite, cut_values[first:last], low, high, own)
    return HistogramCounts(low, high, finite.size, nonfinite, total, squares,
                           edges[first:last], below, distinct)


def counts_proto(counts: HistogramCounts) -> HistogramProto | None:
    """The ``HistogramProto`` of :class:`HistogramCounts` (None when no value is finite): the
    buckets between the edges inside ``(low, high)``, with ``low`` as the first left edge and
    ``high`` as the last right edge, edges the loaders' float32 would merge merged."""
    low, high, num = counts.low, counts.high, counts.num
    if num == 0:
        return None
    if is_constant(low, high):
        # NOTE: a zero-width bucket would be invisible; widen it, and more where +-0.5 rounds
        # away in float32.
        with np.errstate(over="ignore"):
            half = 0.5 if np.float32(low - 0.5) < np.float32(low + 0.5) else abs(low) * 2.0**-20
        low, high = low - half, high + half
        limits, buckets = np.array([high]), np.array([num])
    else:
        edges = np.asarray(counts.edges, dtype=np.float64)
        below = np.asarray(counts.below, dtype=np.int64)
        first = edges.searchsorted(low, side="right")  # (a no-op on edges already inside)
        last = edges.searchsorted(high, side="left")
        edges, below = edges[first:last], below[first:last]
        limits = np.empty(len(edges) + 1)
        limits[:-1] = edges
        limits[-1] = high
        buckets = np.empty(len(limits), dtype=np.int64)  # between neighbouring edges
        buckets[0] = below[0] if len(below) else num
        if len(below):
            np.subtract(below[1:], below[:-1], out=buckets[1:-1])
            buckets[-1] = num - below[-1]
        limits, buckets = _float32_distinct(low, limits, buckets, counts.distinct)
    return _encoded(low, high, float(num), counts.total, counts.squares, limits, buckets)


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
    counts = histogram_counts(values, bins, max_bins)
    return counts_proto(counts), counts.nonfinite
