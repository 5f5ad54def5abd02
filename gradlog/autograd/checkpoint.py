"""Activation checkpointing (PyTorch's ``torch.utils.checkpoint.checkpoint``): trade compute
for memory by not keeping what a region of the forward saves for backward, and recomputing it
when backward needs it.

``use_reentrant=False`` (recommended, as in PyTorch) is built on saved-tensor hooks: inside the
region every saved tensor is replaced by a small holder; the first unpack in a backward pass
reruns the region (with the random state of the forward and grad mode on) and collects what it
saves, in the same order, until every holder is filled. The original graph is the one
backpropagated, so hooks behave as without checkpointing, except that the region's forward runs
twice (module forward hooks fire again in the recomputation). ``use_reentrant=True`` is
PyTorch's older variant: the region runs without recording, and its backward recomputes it and
runs a backward pass of its own.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

from . import random as _random
from .engine import backward as _backward
from .engine import current_graph_task_id, current_pass
from .function import Function
from .grad_mode import enable_grad
from .graph import saved_tensors_hooks
from .tensor import Tensor

__all__ = ["checkpoint", "CheckpointError"]


class CheckpointError(RuntimeError):
    """The recomputation did not save what the forward saved (a non-deterministic region)."""


def noop_context_fn() -> tuple:
    return contextlib.nullcontext(), contextlib.nullcontext()


def checkpoint(function: Any, *args: Any, use_reentrant: bool | None = None,
               context_fn: Any = noop_context_fn, determinism_check: str = "default",
               debug: bool = False, early_stop: bool = True, **kwargs: Any) -> Any:
    """Run ``function(*args, **kwargs)`` without keeping what it saves for backward.

    Args:
        use_reentrant: pass it explicitly (``False`` is recommended); ``None`` warns and uses
            ``True``, as PyTorch does.
        preserve_rng_state: (keyword, default True) recompute with the forward's random state.
        context_fn: returns two context managers, entered around the forward and the
            recomputation (``use_reentrant=False`` only).
        determinism_check: ``"default"`` compares the shapes and dtypes of what the
            recomputation saved with the forward's; ``"none"`` does not.
        early_stop: stop the recomputation once every needed tensor is recomputed.
    """
    if use_reentrant is None:
        warnings.warn(
            "gradlog.utils.checkpoint: the use_reentrant parameter should be passed explicitly. "
            "PyTorch raises an exception when it is not passed. use_reentrant=False is "
            "recommended, but if you need to preserve the current default behavior, you can "
            "pass use_reentrant=True. Refer to docs for more details on the differences between "
            "the two variants.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    if use_reentrant:
        if context_fn is not noop_context_fn or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when "
                             "use_reentrant=False.")
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        return _ReentrantCheckpoint.apply(function, preserve, *args)
    return _Region(function, args, kwargs, preserve, context_fn, determinism_check,
                   early_stop).run()


class _StopRecomputation(Exception):
    pass


class _Holder:
    """What the graph keeps for a saved tensor of a checkpointed region: its position."""

    __slots__ = ("index", "__weakref__")

    def __init__(self, index: int) -> None:
        self.index = index


class _Region:
    """One checkpointed call: its forward, and its recomputation per backward pass."""

    def __init__(self, function: Any, args: tuple, kwargs: dict, preserve: bool,
                 context_fn: Any, determinism_check: str, early_stop: bool) -> None:
        self.function, self.args, self.kwargs = function, args, kwargs
        self.rng_state = _random.get_rng_state() if preserve else None
        self.context_fn = context_fn
        self.check = determinism_check == "default"
        self.early_stop = early_stop
        self.saved_meta: list = []         # (shape, dtype) per tensor the forward saved
        self.recomputed: dict[int, dict] = {}  # backward pass id -> holder index -> tensor

    def run(self) -> Any:
        forward_ctx, self.recompute_ctx = self.context_fn()
        with saved_tensors_hooks(self._pack, self._unpack), forward_ctx:
            return self.function(*self.args, **self.kwargs)

    def _pack(self, t: Tensor) -> _Holder:
        self.saved_meta.append((tuple(t._data.shape), t._data.dtype))
        return _Holder(len(self.saved_meta) - 1)

    def _unpack(self, holder: _Holder) -> Tensor:
        task = current_graph_task_id()
        if task not in self.recomputed:
            self.recomputed[task] = self._recompute()
        values = self.recomputed[task]
        if holder.index not in values:
            raise CheckpointError(
                "gradlog.utils.checkpoint: Unpack is being triggered for a tensor that was "
                "already unpacked once. If you are calling ctx.saved_tensors in backward, make "
                "sure to do so only once. Otherwise please open an issue with details on your "
                "use case.")
        t = values.pop(holder.index)
        if not values:
            del self.recomputed[task]
        return t

    def _recompute(self) -> dict:
        values: dict[int, Tensor] = {}
        needed = len(self.saved_meta)

        def pack(t: Tensor) -> None:
            values[len(values)] = t.detach()
            if self.early_stop and len(values) == needed:
                raise _StopRecomputation

        def unpack(_packed: Any) -> Tensor:
            raise CheckpointError("gradlog.utils.checkpoint: a tensor saved during the "
                                  "recomputation was unpacked during it")
        with _random_state(self.rng_state), enable_grad(), \
                saved_tensors_hooks(pack, unpack), self.recompute_ctx:
            try:
                self.function(*self.args, **self.kwargs)
            except _StopRecomputation:
                pass
        if self.check:
            self._check(values)
        return values

    def _check(self, values: dict) -> None:
        if len(values) != len(self.saved_meta):
            raise CheckpointError(
                "gradlog.utils.checkpoint: A different number of tensors was saved during the "
                "original forward and recomputation.\nNumber of tensors saved during forward: "
                f"{len(self.saved_meta)}\nNumber of tensors saved during recomputation: "
                f"{len(values)}.")
        wrong = []
        for i, (shape, dtype) in enumerate(self.saved_meta):
            t = values[i]
            got = (tuple(t._data.shape), t._data.dtype)
            if got != (shape, dtype):
                wrong.append(f"tensor at position {i}:\nsaved metadata: {{'shape': {shape}, "
                             f"'dtype': {dtype}}}\nrecomputed metadata: {{'shape': {got[0]}, "
                             f"'dtype': {got[1]}}}\n")
        if wrong:
            raise CheckpointError(
                "gradlog.utils.checkpoint: Recomputed values for the following tensors have "
                "different metadata than during the forward pass.\n" + "".join(wrong))


@contextlib.contextmanager
def _random_state(state: Any) -> Any:
    """Run the block with the global random state ``state`` (None: as it is), then restore."""
    if state is None:
        yield
        return
    current = _random.get_rng_state()
    _random.set_rng_state(state)
    try:
        yield
    finally:
        _random.set_rng_state(current)


class _ReentrantCheckpoint(Function):
    """``use_reentrant=True``: the forward records nothing; the backward recomputes the region
    with grad mode on and backpropagates through it in a pass of its own."""

    @staticmethod
    def forward(ctx: Any, function: Any, preserve: bool, *args: Any) -> Any:
        ctx.function = function
        ctx.rng_state = _random.get_rng_state() if preserve else None
        ctx.args = [a if not isinstance(a, Tensor) else None for a in args]
        ctx.tensor_positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.save_for_backward(*(a for a in args if isinstance(a, Tensor)))
        return function(*args)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        running = current_pass()
        if running is not None and running.targets is not None:
            raise RuntimeError(
                "When use_reentrant=True, gradlog.utils.checkpoint is incompatible with .grad() "
                "or passing an `inputs` parameter to .backward(). To resolve this error, you can "
                "either set use_reentrant=False, or call .backward() without passing the "
                "`inputs` argument.")
        inputs = list(ctx.args)
        for i, t in zip(ctx.tensor_positions, ctx.saved_tensors):
            inputs[i] = t.detach().requires_grad_(ctx.needs_input_grad[i + 2])
        with _random_state(ctx.rng_state), enable_grad():
            outputs = ctx.function(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads)
                 if isinstance(o, Tensor) and o._requires_grad and g is not None]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not "
                               "necessary")
        _backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None, *(inputs[i].grad if i in ctx.tensor_positions else None
                              for i in range(len(inputs))))
