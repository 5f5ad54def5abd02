"""Tensors saved for backward: version checks, the "second time" error, saved-tensor hooks.

``Function.apply`` turns what an op saved into entries (``save``); ``Node.saved_tensors``
turns them back into tensors (``unpack``). An entry is the tensor itself when it has no
version counter yet (it is at version 0, and an in-place change would create a counter that
the check sees), else a :class:`SavedTensor`. With ``saved_tensors_hooks`` active, every
tensor is passed to the pack hook and the entry keeps only what the hook returned.
"""

from __future__ import annotations

import contextvars
from typing import Any

import numpy as np

from .tensor import Tensor, VersionCounter, wrap

__all__ = ["SavedTensor", "FREED", "save_tensor", "push_hooks", "pop_hooks", "current_hooks"]

FREED = object()  # a node's saved entries after a backward without retain_graph

# The (pack, unpack) pairs of the saved_tensors_hooks contexts entered in this thread, innermost
# last; only the innermost pair applies, as in PyTorch.
HOOKS: contextvars.ContextVar[tuple] = contextvars.ContextVar("gradlog_saved_hooks", default=())


def current_hooks() -> tuple | None:
    stack = HOOKS.get()
    return stack[-1] if stack else None


def push_hooks(pack: Any, unpack: Any) -> contextvars.Token:
    return HOOKS.set(HOOKS.get() + ((pack, unpack),))


def pop_hooks(token: contextvars.Token) -> None:
    HOOKS.reset(token)


class SavedTensor:
    """A saved tensor that needs more than itself: the tensor and its version when saved; or,
    for the node's own output (``own_output``), its array and counter (not the tensor, whose
    grad_fn is the node: no reference cycle); or what a pack hook returned and the autograd
    identity (grad_fn, output number, leaf sink) to give the tensor the unpack hook returns."""

    def unpack(self, node: Any) -> Tensor:
        if self.unpack_hook is not None:
            return self._unpack_with_hook(node)
        if not self.own_output:
            t = self.tensor
            if t._vc.value != self.version:
                version_error(node, t._data, t._vc.value, self.version, t._output_nr,
                              t._grad_fn)
            return t
        if self.vc.value != self.version:
            version_error(node, self.data, self.vc.value, self.version, self.output_nr, node)
        return _alias(self.data, node, self.output_nr, None, self.vc)

    def _unpack_with_hook(self, node: Any) -> Tensor:
        t = self.unpack_hook(self.packed)
        if not isinstance(t, Tensor):
            raise TypeError("Output of saved tensor unpack_hook expected to be a Tensor but got "
                            f"result of type {type(t).__name__}")
        if not self.requires_grad:
            return t
        grad_fn = node if self.own_output else self.grad_fn
        return _alias(t._data, grad_fn, self.output_nr, self.grad_acc, t._vc)


def _alias(data: np.ndarray, grad_fn: Any, nr: int, acc: Any,
           vc: VersionCounter | None) -> Tensor:
    """A tensor that requires grad over ``data``, with the given place in the graph."""
    t = wrap(data)
    t._requires_grad = True
    t._grad_fn = grad_fn
    if nr:
        t._output_nr = nr
    if acc is not None:
        t._grad_acc = acc
    if vc is not None:
        t._vc = vc
    return t


def save_tensor(t: Tensor, own_output_nr: int | None, hooks: tuple | None) -> Any:
    """The entry for a saved tensor; ``own_output_nr`` is set when it is the node's output."""
    if t._inference:
        raise RuntimeError(
            "Inference tensors cannot be saved for backward. Please do not use Tensors created "
            "in inference mode in computation tracked by autograd. To work around this, you "
            "can make a clone to get a normal tensor and use it in autograd, or use "
            "`gradlog.no_grad()` instead of `gradlog.inference_mode()`.")
    if hooks is not None:
        return _pack(t, own_output_nr, hooks)
    vc = t._vc
    if own_output_nr is None:
        if vc is None:
            return t
        s = _new(SavedTensor)
        s.tensor, s.version, s.own_output, s.unpack_hook = t, vc.value, False, None
        return s
    if vc is None:
        vc = t._vc = VersionCounter()
    s = _new(SavedTensor)
    s.tensor, s.data, s.vc, s.version, s.own_output, s.output_nr, s.unpack_hook = \
        None, t._data, vc, vc.value, True, own_output_nr, None
    return s


def _pack(t: Tensor, own_output_nr: int | None, hooks: tuple) -> SavedTensor:
    pack, unpack_hook = hooks
    before = t._version
    packed = pack(t)
    if t._version != before:
        raise RuntimeError(
            "A saved tensor pack hook is modifying its input in place. Tensors provided as input "
            "to pack hook cannot be modified by in-place operations as this can lead to "
            "unexpected side-effects. Please open an issue if you need to perform in-place "
            "operations on the input to a pack hook.")
    s = _new(SavedTensor)
    s.tensor, s.packed, s.unpack_hook, s.requires_grad = None, packed, unpack_hook, \
        t._requires_grad
    s.own_output = own_output_nr is not None
    s.output_nr = own_output_nr if s.own_output else t._output_nr
    s.grad_fn = None if s.own_output else t._grad_fn
    s.grad_acc = t._grad_acc if t._grad_fn is None and t._requires_grad else None
    return s


def freed_error(node: Any) -> None:
    raise RuntimeError(
        "Trying to backward through the graph a second time (or directly access saved tensors "
        "after they have already been freed). Saved intermediate values of the graph are freed "
        "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
        "backward through the graph a second time or if you need to access saved tensors after "
        f"calling backward. (The saved tensors of {node.name()} were freed.)")


def version_error(node: Any, data: np.ndarray, now: int, expected: int, nr: int,
                  owner: Any) -> None:
    from . import anomaly
    from .dtypes import as_dtype
    what = f"which is output {nr} of {owner.name().removesuffix('Backward0')}, " \
        if owner is not None else ""
    shape = ", ".join(str(d) for d in data.shape)
    hint = ("Hint: the backtrace further above shows the operation that failed to compute its "
            "gradient. The variable in question was changed in there or anywhere later. Good "
            "luck!" if anomaly.state.enabled else
            "Hint: enable anomaly detection to find the operation that failed to compute its "
            "gradient, with gradlog.autograd.set_detect_anomaly(True).")
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [gradlog.{as_dtype(data.dtype).legacy_name} [{shape}]], {what}is at "
        f"version {now}; expected version {expected} instead. {hint}")


_new = object.__new__
