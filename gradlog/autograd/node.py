"""Nodes of the backward graph (``grad_fn``), and the leaf sink ``AccumulateGrad``.

A node is also the ``ctx`` of its Function's forward and backward, as in PyTorch. ``_next``
holds one entry per forward argument: the graph edge of a tensor that requires grad (its node,
or ``(node, output_nr)`` for an output other than the first), ``None`` for a tensor that does
not, ``False`` for a non-tensor argument (which ``next_functions`` leaves out, as PyTorch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..utils.hooks import HookRegistry, RemovableHandle, register
from . import saved as _saved
from .grad_mode import state as _mode
from .saved import FREED
from .tensor import Tensor, wrap
from .views import refresh_view

__all__ = ["Node", "AccumulateGrad", "edge_of", "grad_fn_of"]


class Node:
    """A node of the backward graph (a ``grad_fn``); also the ``ctx`` of its Function.

    Hooks: ``register_prehook(fn(grad_outputs) -> tuple | None)`` runs before the backward,
    ``register_hook(fn(grad_inputs, grad_outputs) -> tuple | None)`` after it.
    """

    __slots__ = ("_next", "_seq", "_saved", "needs_input_grad", "__dict__", "__weakref__")

    _fn: Any = None  # the Function class whose backward this node runs
    # Rarely used state: class-level defaults, set on an instance only when needed.
    _hooks_t: dict | None = None      # output_nr -> tensor hooks of that output
    _retain: dict | None = None       # output_nr -> weakref of a tensor that retains grad
    _pre_hooks: HookRegistry | None = None
    _post_hooks: HookRegistry | None = None
    _trace: Any = None                # forward stack, recorded in anomaly mode
    _n_out = 1
    _plain = True  # False once any of the above is set: the engine then runs the hooks

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"

    @property
    def next_functions(self) -> tuple:
        """``(node, output_nr)`` per tensor input; ``(None, 0)`` for one that needs no grad,
        and for a Python number that PyTorch wraps as a tensor (``x * 2``)."""
        entries = self._next
        return tuple((None, 0) if not e else e if e.__class__ is tuple else (e, 0)
                     for e in (entries[i] for i in self._input_positions()))

    def _input_positions(self) -> list:
        """The forward arguments ``next_functions`` lists, by position."""
        numbers = self._fn.number_inputs if self._fn is not None else ()
        return [i for i, e in enumerate(self._next) if e is not False or i in numbers]

    @property
    def metadata(self) -> dict:
        return self.__dict__.setdefault("_metadata", {})

    # -- ctx API (PyTorch's FunctionCtx) -------------------------------------------------
    def save_for_backward(self, *tensors: Any) -> None:
        self._saved = tensors  # turned into entries by Function.apply once the outputs exist

    @property
    def saved_tensors(self) -> tuple:
        """The saved tensors, version-checked (raw values as they were saved)."""
        saved = self._saved
        if not saved:
            return ()
        if saved is FREED:
            _saved.freed_error(self)
        out = []
        for s in saved:
            if s.__class__ is _saved.SavedTensor:
                out.append(s.unpack(self))
            elif isinstance(s, Tensor):  # saved at version 0 without a counter (see saved.py)
                vc = s._vc
                if vc is not None and vc.value:
                    _saved.version_error(self, s._data, vc.value, 0, s._output_nr, s._grad_fn)
                out.append(s)
            else:  # None, or a raw value kept as it was
                out.append(s)
        return tuple(out)

    def mark_non_differentiable(self, *tensors: Any) -> None:
        self.__dict__["_non_diff"] = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self.__dict__["_materialize"] = bool(value)

    def mark_dirty(self, *tensors: Any) -> None:
        self.__dict__["_dirty"] = tensors

    # -- node hooks ----------------------------------------------------------------------
    def register_hook(self, fn: Any) -> RemovableHandle:
        """``fn(grad_inputs, grad_outputs) -> tuple | None``, after this node's backward."""
        if self._post_hooks is None:
            self._post_hooks = HookRegistry()
            self._plain = False
        return register(self._post_hooks, fn)

    def register_prehook(self, fn: Any) -> RemovableHandle:
        """``fn(grad_outputs) -> tuple | None``, before this node's backward."""
        if self._pre_hooks is None:
            self._pre_hooks = HookRegistry()
            self._plain = False
        return register(self._pre_hooks, fn)

    def _tensor_hooks(self, nr: int) -> HookRegistry:
        """The tensor hooks of output ``nr`` (created on first use)."""
        if self._hooks_t is None:
            self._hooks_t = {}
            self._plain = False
        hooks = self._hooks_t.get(nr)
        if hooks is None:
            hooks = self._hooks_t[nr] = HookRegistry()
        return hooks

    # -- called by the engine ------------------------------------------------------------
    def _apply(self, grads: list) -> tuple:
        """Run the backward: one gradient per forward argument."""
        if self._saved is FREED:
            _saved.freed_error(self)
        out = self._fn.backward(self, *grads)
        if out.__class__ is not tuple:
            out = (out,)
        if len(out) != len(self._next):
            raise RuntimeError(f"function {self.name()} returned an incorrect number of "
                               f"gradients (expected {len(self._next)}, got {len(out)})")
        return out



class AccumulateGrad(Node):
    """The sink of a leaf that requires grad: adds the gradient into ``.grad``, then runs the
    leaf's post-accumulate hooks. The leaf's tensor hooks are this node's output hooks."""

    __slots__ = ("variable",)
    _plain = False

    def __init__(self, variable: Tensor) -> None:
        self._next = ()
        self._seq = ACC_SEQ
        self._saved = None
        self.needs_input_grad = ()
        self.variable = variable

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    def __repr__(self) -> str:
        return f"<AccumulateGrad object at {id(self):#x}>"

    @property
    def _hooks_t(self) -> dict | None:  # type: ignore[override]
        hooks = self.variable._hooks
        return {0: hooks} if hooks else None

    def _apply(self, grads: list) -> tuple:
        leaf = self.variable
        first = leaf._grad is None
        accumulate_grad(leaf, grads[0], _mode.grad_enabled)
        if first and leaf._grad is not None:  # NOTE: PyTorch moves the gradient into an
            grads[0] = wrap(leaf._grad._data)  # empty .grad: this node's post-hooks see its
            # memory (and so what post-accumulate hooks changed there)
        if leaf._post_hooks:
            for hook in tuple(leaf._post_hooks.values()):
                result = hook(leaf)
                if result is not None and result is not leaf:  # PyTorch accepts `p.add_(...)`
                    if not isinstance(result, Tensor):
                        raise TypeError(f"expected Variable, but hook returned "
                                        f"'{type(result).__name__}'")
                    raise RuntimeError("Tensor post accumulate grad hooks should return None.")
        return ()


ACC_SEQ = 1 << 62  # leaf sinks run as soon as they are ready (as PyTorch's AccumulateGrad)


def accumulate_grad(t: Tensor, g: Tensor, create_graph: bool) -> None:
    """Add ``g`` into ``t.grad``, the one place where a gradient buffer is taken as ``.grad``
    without a copy: only a buffer the backward pass made and showed to no user code
    (``g._owned``, see the engine's ``disown``), and never under ``create_graph`` (``.grad`` is
    then a recorded copy, as PyTorch's). Any other is copied, so that ``.grad`` never shares
    memory with a tensor the user can still change."""
    data = g._data
    target = t._data
    if data.shape != target.shape or data.dtype != target.dtype:
        if data.size == target.size or data.ndim < target.ndim:
            data = np.broadcast_to(data, target.shape).astype(target.dtype)
        else:
            raise RuntimeError(f"gradient of shape {tuple(data.shape)} and dtype {data.dtype} "
                               f"cannot be accumulated into a tensor of shape "
                               f"{tuple(target.shape)} and dtype {target.dtype}")
        g = wrap(data)
        g._owned = True
    old = t._grad
    if old is None:
        if create_graph:
            t._grad = g.clone()
        elif g._owned and data.flags.c_contiguous and data.flags.writeable:
            g._owned = False  # from now on .grad holds it
            t._grad = g
        else:
            t._grad = wrap(np.array(data, order="C"))
    elif create_graph or old._requires_grad:
        t._grad = old + g
    else:
        try:
            np.add(old._data, data, out=old._data)
        except ValueError:  # a read-only or broadcast .grad set by the user
            old._data = old._data + data
        old._bump_version()


def grad_fn_of(t: Tensor) -> Any:
    """``t``'s grad_fn, regenerated first if ``t`` is a view whose base changed in place since
    (see views.py)."""
    if t._base is not None:
        refresh_view(t)
    return t._grad_fn


def next_entry(t: Tensor) -> Any:
    """The ``_next`` entry of an input that requires grad (see the module docstring)."""
    fn = t._grad_fn if t._base is None else grad_fn_of(t)
    if fn is None:
        if t._made_in:  # a view made in no_grad or inference mode: no edge, as in PyTorch
            return None
        return t._grad_acc or accumulator(t)
    nr = t._output_nr
    return fn if nr == 0 else (fn, nr)


def edge_of(t: Tensor) -> tuple:
    """The graph edge a tensor that requires grad feeds: ``(node, output_nr)``."""
    entry = next_entry(t)
    return entry if entry.__class__ is tuple else (entry, 0)


def accumulator(t: Tensor) -> AccumulateGrad:
    acc = t._grad_acc = AccumulateGrad(t)
    return acc


def rebase(t: Tensor, node: Node, nr: int, *, move_retain: bool = True) -> None:
    """Make ``t`` output ``nr`` of ``node`` after an in-place change. Its tensor hooks stay
    with the old node (PyTorch resets a tensor's hooks on an in-place op); a tensor that
    retained its grad retains it for the new value, unless ``move_retain`` is False (an
    in-place view op, after which PyTorch still retains the old value's gradient)."""
    old_node, old_nr = t._grad_fn, t._output_nr
    t._grad_fn = node
    t._requires_grad = True
    if nr:
        t._output_nr = nr
    else:
        t.__dict__.pop("_output_nr", None)
    t.__dict__.pop("_hooks", None)
    if t._base is not None:
        t._view_version = t._vc.value
    if move_retain:
        t._move_retained_grad(old_node, old_nr)
