"""The gradient reducer behind ``DistributedDataParallel``: parameters grouped into buckets, each
bucket all-reduced (non-blocking) as soon as backward has produced all its gradients, while
backward goes on with the earlier layers -- PyTorch's DDP design, over MPI.

As in PyTorch 2.13: the first iteration reduces all gradients in one bucket and records the
order in which they became ready; the next forward rebuilds the buckets in rank 0's order
(first bucket up to 1 MiB, then up to ``bucket_cap_mb``), so later iterations launch bucket 0
while backward is still running. Buckets are launched in index order on every rank (MPI
matches collectives by order). Each gradient is multiplied by 1/world_size while it is copied
into its bucket, the buckets are summed, and the averages are copied back into ``.grad`` at
the end of backward (``gradient_as_bucket_view=False``).
"""

from __future__ import annotations

import math
import time
import weakref
from typing import Any

import numpy as np

from ... import autograd
from ...autograd.creation import from_numpy
from ...autograd.grad_mode import no_grad
from ...distributed.process_group import ReduceOp

__all__ = ["Reducer", "assign_buckets", "FIRST_BUCKET_BYTES", "BUCKET_CAP_MB"]

MIB = 1024 * 1024
FIRST_BUCKET_BYTES = 1 * MIB   # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
BUCKET_CAP_MB = 25


def assign_buckets(sizes: list[int], dtypes: list[Any], order: list[int],
                   limits: list[float]) -> list[list[int]]:
    """Group tensor indices into buckets: tensors taken in ``order``, one open bucket per dtype,
    closed when it holds ``limits[k]`` bytes or more (``k``: buckets closed so far for that
    dtype, the last limit repeating); buckets sorted by where their first tensor is in
    ``order``."""
    open_: dict[Any, tuple[list[int], int]] = {}
    closed_per_dtype: dict[Any, int] = {}
    buckets: list[list[int]] = []
    for i in order:
        key = np.dtype(dtypes[i])
        members, size = open_.get(key, ([], 0))
        members.append(i)
        size += sizes[i]
        k = closed_per_dtype.get(key, 0)
        if size >= limits[min(k, len(limits) - 1)]:
            buckets.append(members)
            closed_per_dtype[key] = k + 1
            open_.pop(key, None)
        else:
            open_[key] = (members, size)
    buckets.extend(members for members, _ in open_.values())
    position = {i: n for n, i in enumerate(order)}
    return sorted(buckets, key=lambda b: position[b[0]])


class _Bucket:
    """One flat buffer holding some parameters' gradients back to back."""

    def __init__(self, members: list[int], params: list) -> None:
        self.members = members
        self.slices: dict[int, slice] = {}
        offset = 0
        for i in members:
            n = params[i].numel()
            self.slices[i] = slice(offset, offset + n)
            offset += n
        self.buffer = np.empty(offset, dtype=params[members[0]].detach().numpy().dtype)
        self.pending = len(members)
        self.work: Any = None


class Reducer:
    """Averages the gradients of ``named_params`` across the ranks of ``group`` (see the module
    docstring). ``timing`` holds the seconds spent launching collectives, polling them during
    backward and waiting for them at its end."""

    def __init__(self, named_params: list, group: Any, *, bucket_cap_mb: float | None,
                 find_unused_parameters: bool) -> None:
        self.names = [n for n, _ in named_params]
        self.params = [p for _, p in named_params]
        self.group = group
        self.world_size = group.size()
        self.find_unused_parameters = find_unused_parameters
        cap = (BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb) * MIB
        first = FIRST_BUCKET_BYTES if bucket_cap_mb is None else cap
        self._limits = [first, cap]
        n = len(self.params)
        self._sizes = [p.numel() * p.detach().numpy().itemsize for p in self.params]
        self._dtypes = [p.detach().numpy().dtype for p in self.params]
        if find_unused_parameters:  # never rebuilt: reverse parameter order, size-capped
            self._set_buckets(assign_buckets(self._sizes, self._dtypes,
                                             list(reversed(range(n))), self._limits))
            self._rebuilt = True
        else:  # one bucket until the first backward shows the real order
            self._set_buckets(assign_buckets(self._sizes, self._dtypes, list(range(n)),
                                             [math.inf]))
            self._rebuilt = False
        self._ready_order: list[int] = []
        self._rebuild_order: list[int] | None = None
        self._expect = False
        self._ready = [False] * n
        self._next = 0
        self._touched = False
        self.buckets_launched = 0
        self.timing = {"launch": 0.0, "poll": 0.0, "wait": 0.0}
        me = weakref.ref(self)
        handles = [p.register_post_accumulate_grad_hook(_ready_hook(me, i))
                   for i, p in enumerate(self.params)]
        handles.append(autograd.register_backward_end_hook(_end_hook(me)))
        self._finalizer = weakref.finalize(self, _remove_all, handles)

    def _set_buckets(self, groups: list[list[int]]) -> None:
        self.buckets = [_Bucket(g, self.params) for g in groups]
        self._where = {i: b for b in self.buckets for i in b.members}

    def bucket_names(self) -> list[list[str]]:
        """The parameter names in each bucket, in launch order."""
        return [[self.names[i] for i in b.members] for b in self.buckets]

    def remove(self) -> None:
        """Remove the reducer's hooks from the parameters and the autograd engine."""
        self._finalizer()

    # -- the iteration --------------------------------------------------------------------------
    def prepare_for_forward(self) -> None:
        if self._rebuild_order is not None:
            order, self._rebuild_order = self._rebuild_order, None
            self._set_buckets(assign_buckets(self._sizes, self._dtypes, order, self._limits))
            self._rebuilt = True

    def prepare_for_backward(self) -> None:
        """The next backward pass into these parameters is reduced."""
        self._expect = True
        self._ready = [False] * len(self.params)
        self._next = 0
        self._touched = False
        self.buckets_launched = 0
        for b in self.buckets:
            b.pending = len(b.members)
            b.work = None

    def mark_ready(self, i: int) -> None:
        if self._ready[i]:
            self._expect = False
            raise RuntimeError(
                f"Expected to mark a variable ready only once: parameter '{self.names[i]}' "
                "received a gradient twice in one backward pass of DistributedDataParallel "
                "(a parameter shared or used in a reentrant backward)")
        self._ready[i] = True
        self._touched = True
        bucket = self._where[i]
        grad = self.params[i].grad.numpy().reshape(-1)
        np.multiply(grad, bucket.buffer.dtype.type(1.0 / self.world_size),
                    out=bucket.buffer[bucket.slices[i]])
        if not self._rebuilt:
            self._ready_order.append(i)
        bucket.pending -= 1
        if bucket.pending == 0:
            self._launch_ready()
        else:
            self._poll()

    def _launch_ready(self) -> None:
        start = time.perf_counter()
        while self._next < len(self.buckets) and self.buckets[self._next].pending == 0:
            bucket = self.buckets[self._next]
            bucket.work = self.group.allreduce(bucket.buffer, ReduceOp.SUM)
            self._next += 1
            self.buckets_launched += 1
        self.timing["launch"] += time.perf_counter() - start

    def _poll(self) -> None:
        # MPI moves a non-blocking collective on only inside MPI calls: poll the oldest one.
        if self._next and self.buckets[self._next - 1].work is not None:
            start = time.perf_counter()
            self.buckets[self._next - 1].work.is_completed()
            self.timing["poll"] += time.perf_counter() - start

    def finalize_backward(self) -> None:
        """At the end of a backward pass: wait for every bucket, write the averages."""
        if not (self._expect and self._touched):
            return
        self._expect = False
        missing = [i for i, ready in enumerate(self._ready) if not ready]
        if missing and not self.find_unused_parameters:
            names = ", ".join(self.names[i] for i in missing[:8])
            raise RuntimeError(
                f"DistributedDataParallel: {len(missing)} parameter(s) received no gradient in "
                f"this backward pass: {names}. Every parameter must take part in producing "
                "the loss, or pass find_unused_parameters=True")
        used, used_work = None, None
        if self.find_unused_parameters:
            used = np.ones(len(self.params), dtype=np.int32)
            for i in missing:  # unused here: contributes zeros
                used[i] = 0
                bucket = self._where[i]
                bucket.buffer[bucket.slices[i]] = 0
                bucket.pending -= 1
            self._launch_ready()
            used_work = self.group.allreduce(used, ReduceOp.MAX)
        start = time.perf_counter()
        for bucket in self.buckets:
            bucket.work.wait()
        if used_work is not None:
            used_work.wait()
        self.timing["wait"] += time.perf_counter() - start
        self._write_back(used)
        if not self._rebuilt and self._rebuild_order is None:
            order = np.array(self._ready_order, dtype=np.int64)
            self.group.broadcast(order, 0).wait()  # every rank takes rank 0's order
            self._rebuild_order = [int(i) for i in order]

    def _write_back(self, used: np.ndarray | None) -> None:
        with no_grad():
            for bucket in self.buckets:
                for i in bucket.members:
                    if used is not None and not used[i]:
                        continue  # no rank used it: .grad stays as it was, as in PyTorch
                    p = self.params[i]
                    average = bucket.buffer[bucket.slices[i]].reshape(tuple(p.shape))
                    if p.grad is None:
                        p.grad = from_numpy(average.copy())
                    else:
                        p.grad.copy_(average)


def _ready_hook(reducer_ref: Any, i: int) -> Any:
    def hook(param: Any) -> None:
        reducer = reducer_ref()
        if reducer is not None and reducer._expect:
            reducer.mark_ready(i)
    return hook


def _end_hook(reducer_ref: Any) -> Any:
    def hook() -> None:
        reducer = reducer_ref()
        if reducer is not None:
            reducer.finalize_backward()
    return hook


def _remove_all(handles: list) -> None:
    for h in handles:
        h.remove()
