"""Statistics of torch tensors, computed where the tensors live: histogram counts against given
edges, extrema, sums and non-finite counts. Only the small results cross to the host.

The training thread does as little as it can. Each call takes a snapshot of the tensors on
their own device (a device copy: the step may change them at once) and returns a function
giving the results, which the writer's thread calls:

* on CUDA the reductions run at once on a side stream that waits for the snapshot; their
  results are copied into pinned host memory without blocking, and an event recorded after
  the copy is what the writer's thread waits on. Nothing here synchronises the device or
  calls ``.item()`` on the training thread.
* on the CPU the snapshot is the only work of the training thread; the counting happens when
  the writer's thread asks, with the writer's own exact counting
  (``gradlog.tensorboard.histogram``), which reads the snapshot's host memory in place. NOTE:
  measured on one core, torch's CPU ``bucketize`` against the 1549 default edges costs ~60 ns
  per value and the fastest exact torch formulation found (a 65536-slot table of the float's
  order-preserving bits) ~6 ns, against ~2.5 ns for the writer's sorted blocks.

The device counts are exact and equal to numpy's: the values are compared, in their own dtype
(half types widened to float32, exactly), with "cuts" that make ``x < cut`` the same test as
``x < edge``; ``bucketize`` + ``bincount`` (without weights) count them, which is
deterministic on CUDA, unlike ``histc`` (pytorch issue 151610).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..tensorboard.histogram import HistogramCounts, cuts, fixed_edges, histogram_counts
from ..utils.reductions import ValueSummary, sum_of_squares
from .base import computed_once

__all__ = ["TorchStatistics"]

_HEAD = 5  # low, high, num, total, squares


class TorchStatistics:
    """Counts and reductions of torch tensors, on their devices (one per engine)."""

    def __init__(self, torch: Any, is_snapshot: Callable[[Any], bool] = lambda t: False
                 ) -> None:
        self.torch = torch
        self._is_snapshot = is_snapshot  # (the engine's snapshots: not copied again)
        self._cuts: dict[tuple, Any] = {}  # (edges id, dtype, device) -> cuts on the device
        self._streams: dict[Any, Any] = {}  # CUDA device -> side stream

    # -- histograms ------------------------------------------------------------------------
    def histogram_counts(self, tensors: list, bins: Any = "tensorflow"
                         ) -> Callable[[], list[HistogramCounts]]:
        """A function returning each tensor's :class:`HistogramCounts` (call it where the
        numbers are needed: on the writer's thread it waits for the device work)."""
        torch = self.torch
        for t in tensors:
            _check(torch, t)
        rule = isinstance(bins, str) and bins != "tensorflow"
        # (the copies _pending makes are read by nothing else: counted in place)
        own = [not self._is_snapshot(t) for t in tensors]

        def on_host(snapshots: list) -> list[HistogramCounts]:
            return [histogram_counts(_host_view(torch, s), bins, scratch=mine)
                    for s, mine in zip(snapshots, own)]
        # NOTE: numpy's rules ("auto", "fd", ...) need percentiles or spreads computed exactly
        # as numpy does: counted by the host code wherever the tensors are.
        return self._pending(tensors, on_host, None if rule else functools.partial(
            self.counts_on_device, bins=bins))

    def counts_on_device(self, tensors: list, bins: Any = "tensorflow"
                         ) -> Callable[[], list[HistogramCounts]]:
        """The device counting itself, with torch ops on ``tensors`` as they are, wherever
        they are (what CUDA tensors get, on the side stream; on CPU tensors it shows that the
        counts equal numpy's). ``bins``: not one of numpy's rules."""
        fixed = fixed_edges(bins)
        count = None if fixed is not None else int(bins)
        counted = [self._counted_on_device(v, fixed, count) for v in tensors]
        fetch = self._to_host([p for p, _ in counted])
        layouts = [layout for _, layout in counted]
        return lambda: [_unpacked(v, layout) for v, layout in zip(fetch(), layouts)]

    def _counted_on_device(self, t: Any, fixed: tuple | None, count: int | None):
        torch = self.torch
        x = _values(torch, t)
        finite = torch.isfinite(x)
        inf = torch.full((), math.inf, dtype=x.dtype, device=x.device)
        low = torch.where(finite, x, inf).amin().double()
        high = torch.where(finite, x, -inf).amax().double()
        wide = torch.where(finite, x, torch.zeros((), dtype=x.dtype, device=x.device)).double()
        head = torch.stack([low, high, finite.sum().double(), wide.sum(), (wide * wide).sum()])
        if fixed is not None:
            edges, distinct = fixed
            device_cuts = self._fixed_cuts(edges, x.dtype, x.device)
            device_edges = None
        else:
            edges, distinct = None, False
            device_edges = _linspace(torch, low, high, count + 1)
            device_cuts = _device_cuts(torch, device_edges, x.dtype)
        n = device_cuts.numel()
        index = torch.bucketize(x, device_cuts, right=True)  # how many cuts are <= x
        index = torch.where(finite, index, torch.full_like(index, n + 1))
        below = torch.bincount(index, minlength=n + 2)[:n].cumsum(0)  # finite x < cut[i]
        parts = [head, below.double()] + ([] if device_edges is None else [device_edges])
        return torch.cat(parts), (n, edges, distinct, x.numel())

    def _fixed_cuts(self, edges: np.ndarray, dtype: Any, device: Any) -> Any:
        key = (id(edges), dtype, device)
        found = self._cuts.get(key)
        if found is None or found[0] is not edges:
            np_dtype = np.float64 if dtype == self.torch.float64 else np.float32
            found = self._cuts[key] = (edges, self.torch.from_numpy(
                cuts(edges, np_dtype)).to(device))
        return found[1]

    # -- non-finite values ------------------------------------------------------------------
    def nonfinite_counts(self, tensors: list) -> list[int]:
        """How many values of each tensor are NaN or +-inf: one transfer for all of them (the
        caller decides something from them at once, so this waits for the device)."""
        torch = self.torch
        if not tensors:
            return []
        counts = [(~torch.isfinite(t.detach())).sum().reshape(1) if t.is_floating_point()
                  or t.is_complex() else torch.zeros(1, dtype=torch.int64, device=t.device)
                  for t in tensors]
        return [int(v[0]) for v in self._to_host(counts, wait=True)()]

    # -- sums of squares ------------------------------------------------------------------------
    def sums_of_squares(self, tensors: list, subtract: list | None = None
                        ) -> Callable[[], list[float]]:
        """Each tensor's sum of squares in float64 (of ``tensor - subtract[i]``), where it
        lives; a function giving the numbers. (On the CPU the host's cache-sized float64
        pieces: torch's whole-tensor float64 copies cost more than the rest of the work.)"""
        torch, n = self.torch, len(tensors)
        if n == 0:
            return lambda: []

        def on_host(values: list) -> list[float]:
            return [sum_of_squares(_host_view(torch, values[i]), None if subtract is None
                                   else _host_view(torch, values[n + i])) for i in range(n)]
        return self._pending(list(tensors) + list(subtract or ()), on_host, lambda values:
                             self.squares_on_device(values[:n], values[n:] or None))

    def squares_on_device(self, tensors: list, subtract: list | None = None
                          ) -> Callable[[], list[float]]:
        """The device computation itself, with torch ops on ``tensors`` wherever they are
        (what CUDA tensors get, on the side stream)."""
        out = []
        for i, t in enumerate(tensors):
            x = t.reshape(-1).double()
            if subtract is not None:
                x = x - subtract[i].reshape(-1).double()
            out.append(x.square().sum().reshape(1))
        fetch = self._to_host(out)
        return lambda: [float(v[0]) for v in fetch()]

    # -- summaries of activations -------------------------------------------------------------
    def summaries(self, tensors: list, bounds: tuple[float, float] | None = None
                  ) -> Callable[[], list[ValueSummary]]:
        """Each tensor's :class:`ValueSummary`, computed in float64 where it lives (as
        ``gradlog.utils.reductions.value_summary`` computes it); a function giving them."""
        torch = self.torch

        def rows(values: list) -> list:
            out = []
            for v in values:
                a = v.double()
                nan = torch.full((), math.nan, dtype=torch.float64, device=a.device)
                if a.numel() == 0:
                    zero = torch.zeros((), dtype=torch.float64, device=a.device)
                    out.append(torch.stack([zero, zero, nan if bounds is None else zero, zero]))
                    continue
                # (two passes, as numpy's std: torch.std_mean's one-pass loop is 4x slower)
                mean = a.sum() / a.numel()
                centred = (a - mean).reshape(-1)
                std = torch.sqrt(torch.dot(centred, centred) / a.numel())
                outside = nan if bounds is None else \
                    ((a < bounds[0]) | (a > bounds[1])).double().mean()
                units = a.reshape(a.shape[0], a.shape[1], -1) if a.ndim >= 2 else \
                    a.reshape(1, 1, -1)
                # (a unit is dead when its largest value is <= 0; a NaN keeps it alive, as in
                # numpy's all(units <= 0))
                dead = (units.amax(dim=(0, 2)) <= 0).double().mean()  # (not empty: a unit)
                out.append(torch.stack([mean, std, outside, dead]))
            return out

        def on_device(values: list) -> Callable[[], list[ValueSummary]]:
            fetch = self._to_host(rows(values))
            return lambda: [ValueSummary(*map(float, v)) for v in fetch()]
        return self._pending(tensors, lambda values: [ValueSummary(*r.tolist())
                                                      for r in rows(values)], on_device)

    # -- moving the small results -------------------------------------------------------------
    def _to_host(self, pieces: list, wait: bool = False) -> Callable[[], list]:
        """One transfer per device of the concatenated ``pieces``; returns a function giving
        them back as numpy arrays on the host, in order."""
        torch = self.torch
        sizes = [p.numel() for p in pieces]
        by_device: dict[Any, list[int]] = {}
        for i, p in enumerate(pieces):
            by_device.setdefault(p.device, []).append(i)
        ready: list[Callable[[], np.ndarray]] = []
        for device, where in by_device.items():
            packed = torch.cat([pieces[i].reshape(-1) for i in where])
            if device.type == "cuda" and not wait:
                ready.append(self._pinned_copy(packed))
            else:
                host = packed.cpu().numpy()
                ready.append(lambda host=host: host)

        def values() -> list:
            out: list = [None] * len(pieces)
            for get, where in zip(ready, by_device.values()):
                block, start = get(), 0
                for i in where:
                    out[i] = block[start:start + sizes[i]]
                    start += sizes[i]
            return out
        return values

    def _pinned_copy(self, packed: Any) -> Callable[[], np.ndarray]:
        # NOTE: the results were computed on the side stream (see _pending); the copy goes
        # there too, into pinned memory, and the event after it is what the reader waits on.
        torch = self.torch
        stream = self._side_stream(packed.device)
        with torch.cuda.stream(stream):
            host = torch.empty(packed.shape, dtype=packed.dtype, pin_memory=True)
            host.copy_(packed, non_blocking=True)
            event = torch.cuda.Event()
            event.record(stream)
        packed.record_stream(stream)

        def get() -> np.ndarray:
            event.synchronize()  # (the writer's thread; the training stream never waits)
            return host.numpy()
        return get

    def _side_stream(self, device: Any) -> Any:
        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = self.torch.cuda.Stream(device=device)
        return stream

    def _pending(self, tensors: list, on_host: Callable[[list], Any],
                 on_device: Callable[[list], Callable[[], Any]] | None) -> Callable[[], Any]:
        """The results of the statistics of ``tensors``, as a function to call later (on the
        writer's thread). Decided by where the tensors live: with any on CUDA (and an
        ``on_device``), ``on_device(snapshots)`` is started now on the side stream, after a
        snapshot of each tensor taken on the training stream, and returns the function that
        waits for its results; on the CPU the snapshots are taken now and
        ``on_host(snapshots)`` runs when the results are asked for."""
        torch = self.torch
        cuda = [t for t in tensors if t.device.type == "cuda"]
        if cuda and on_device is None:  # (the host's rules, for values on a device)
            copies = [_host_copy(torch, t) for t in tensors]
            return computed_once(lambda: on_host(copies))
        snapshots = [t if self._is_snapshot(t) else _snapshot(torch, t)
                     for t in tensors]  # (on the training stream)
        if not cuda:
            return computed_once(lambda: on_host(snapshots))
        stream = self._side_stream(cuda[0].device)
        stream.wait_stream(torch.cuda.current_stream(cuda[0].device))
        with torch.cuda.stream(stream):
            for s in snapshots:
                if s.device.type == "cuda":
                    s.record_stream(stream)  # freed only when the side stream is done with it
            return on_device(snapshots)


def _check(torch: Any, t: Any) -> None:
    if t.numel() == 0:
        raise ValueError("cannot make a histogram of an empty tensor")
    if t.is_complex():
        raise TypeError("cannot make a histogram of complex values")


def _values(torch: Any, t: Any) -> Any:
    """The values flattened in the dtype they are compared in: float32 for float32 and the
    half types (exact), float64 for float64 and integers, as numpy's histogram takes them."""
    x = t.detach()
    if x.layout != torch.strided:
        x = x.to_dense()
    x = x.reshape(-1)
    if x.dtype == torch.float64:
        return x
    if x.is_floating_point() and x.element_size() <= 4:
        return x.float()
    return x.double()


def _snapshot(torch: Any, t: Any) -> Any:
    x = t.detach()
    if x.layout != torch.strided:
        x = x.to_dense()
    return x.clone()


def _host_view(torch: Any, t: Any) -> np.ndarray:
    """The values of a CPU snapshot as a numpy array over the same memory (bfloat16, which
    numpy lacks, through float32: exact)."""
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.resolve_conj().resolve_neg().numpy()


def _host_copy(torch: Any, t: Any) -> np.ndarray:
    x = t.detach()
    if x.dtype.is_floating_point and x.element_size() < 4:
        x = x.float()
    return np.array(x.cpu().numpy())

def _linspace(torch: Any, low: Any, high: Any, num: int) -> Any:
    """``np.linspace(low, high, num)`` on the device, the same float64 operations in the same
    order (so the edges are numpy's, bit for bit)."""
    div = num - 1
    y = torch.arange(num, dtype=torch.float64, device=low.device)
    delta = high - low
    step = delta / div
    y = torch.where(step == 0, y / div * delta, y * step)  # (numpy's subnormal case)
    y = y + low
    y[-1] = high
    return y


def _device_cuts(torch: Any, edges: Any, dtype: Any) -> Any:
    """:func:`gradlog.tensorboard.histogram.cuts` on the device."""
    if dtype == torch.float64:
        return edges
    narrow = edges.to(dtype)
    rounded_down = narrow.double() < edges
    return torch.where(rounded_down, torch.nextafter(narrow, torch.full_like(narrow, math.inf)),
                       narrow)


def _unpacked(values: np.ndarray, layout: tuple) -> HistogramCounts:
    n, edges, distinct, numel = layout
    low, high, num, total, squares = (float(v) for v in values[:_HEAD])
    below = values[_HEAD:_HEAD + n].astype(np.int64)
    if edges is None:
        edges = values[_HEAD + n:]
    num = int(num)
    return HistogramCounts(low, high, num, numel - num, total, squares, edges, below, distinct)
