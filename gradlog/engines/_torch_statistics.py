"""Statistics of torch tensors computed with torch ops on the tensors' own device: histogram
counts against given edges, extrema, sums and non-finite counts. Only the small results cross
to the host, every tensor's in one transfer per device.

On CUDA the work does not touch the training stream: the tensors are snapshotted on it (a
device copy, so the training step may change them at once), the reductions run on a side
stream that waits for the snapshot, their results are copied into pinned host memory without
blocking, and an event recorded after the copy is what the writer's thread waits for.
Nothing here synchronises the device or calls ``.item()``. On the CPU the same code runs with
no streams, and the results are ready when the call returns.

The counts are exact and equal to numpy's (``gradlog.tensorboard.histogram``): the values are
compared, in their own dtype (half types widened to float32, exactly), with "cuts" that make
``x < cut`` the same test as ``x < edge``; ``bucketize`` + ``bincount`` (without weights)
count them, which is deterministic on CUDA, unlike ``histc`` (pytorch issue 151610).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..tensorboard.histogram import HistogramCounts, cuts, fixed_edges, histogram_counts

__all__ = ["TorchStatistics"]

_HEAD = 5  # low, high, num, total, squares


class TorchStatistics:
    """Counts and reductions of torch tensors, on their devices (one per engine)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
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
        if isinstance(bins, str) and bins != "tensorflow":
            # NOTE: numpy's rules ("auto", "fd", ...) need percentiles or spreads computed
            # exactly as numpy does: the one case counted on the host.
            arrays = [_host_copy(t) for t in tensors]
            return lambda: [histogram_counts(a, bins) for a in arrays]
        fixed = fixed_edges(bins)
        count = None if fixed is not None else int(bins)

        def work(values: list) -> tuple:
            counted = [self._counted_on_device(v, fixed, count) for v in values]
            return [layout for _, layout in counted], self._to_host([p for p, _ in counted])
        layouts, fetch = self.run_off_stream(tensors, work)

        def finish() -> list[HistogramCounts]:
            return [_unpacked(values, layout) for values, layout in zip(fetch(), layouts)]
        return finish

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
        """Each tensor's sum of squares in float64 (of ``tensor - subtract[i]``), on its
        device; a function giving the numbers."""
        torch = self.torch
        pairs = list(tensors) + ([] if subtract is None else list(subtract))

        def work(values: list) -> Callable[[], list]:
            n = len(tensors)
            out = []
            for i in range(n):
                x = values[i].detach().reshape(-1).double()
                if subtract is not None:
                    x = x - values[n + i].detach().reshape(-1).double()
                out.append((x * x).sum().reshape(1))
            return self._to_host(out) if out else (lambda: [])
        fetch = self.run_off_stream(pairs, work) if pairs else (lambda: [])
        del torch
        return lambda: [float(v[0]) for v in fetch()]

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
        # NOTE: the results were computed on the side stream (see _values); the copy goes
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

    def run_off_stream(self, tensors: list, work: Callable[[list], Any]) -> Any:
        """``work(snapshots)`` where the tensors live: on CUDA on the side stream, after a
        snapshot of each tensor taken on the training stream (so the step may go on changing
        them), on the CPU directly on the tensors."""
        torch = self.torch
        cuda = [t for t in tensors if t.device.type == "cuda"]
        if not cuda:
            return work(tensors)
        snapshots = [t.detach().clone() for t in tensors]  # on the training stream
        stream = self._side_stream(cuda[0].device)
        stream.wait_stream(torch.cuda.current_stream(cuda[0].device))
        with torch.cuda.stream(stream):
            for s in snapshots:
                s.record_stream(stream)  # freed only when the side stream is done with it
            return work(snapshots)


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


def _host_copy(t: Any) -> np.ndarray:
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
