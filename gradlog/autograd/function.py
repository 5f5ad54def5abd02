"""``Function`` and ``Op``, and ``Function.apply``: the one place where graphs are recorded.

A ``Function`` subclass describes one differentiable operation (forward and backward as static
methods). Built-in operations subclass :class:`Op`, whose forward works on numpy arrays;
user-defined functions subclass :class:`Function`, whose forward gets tensors (with grad mode
off, as in PyTorch). Backward methods always work on tensors, so the same formula serves double
backward. ``apply`` decides for both whether a graph is recorded and with which edges.
"""

from __future__ import annotations

import itertools
import traceback
from typing import Any

import numpy as np

from . import anomaly, views
from . import saved as _saved
from .custom import CustomNode, adopt_outputs, release_inputs
from .grad_mode import GRAD, INFERENCE, no_grad
from .grad_mode import mode as _mode
from .node import AccumulateGrad, Node, next_entry
from .tensor import Tensor, wrap

__all__ = ["Function", "Op", "Node", "AccumulateGrad", "FunctionCtx"]

_seq = itertools.count()
_ndarray = np.ndarray  # a module global: numpy's module __getattr__ makes np.ndarray slow
_FLOAT32 = np.dtype(np.float32)
_NO_NEEDS = tuple((False,) * n for n in range(33))  # needs_input_grad when nothing records


class FunctionMeta(type):
    """Gives every Function subclass its node class, named ``<Name>Backward`` as in PyTorch."""

    def __init__(cls, name: str, bases: tuple, ns: dict) -> None:
        super().__init__(name, bases, ns)
        node_name = ns.get("node_name") or f"{name}Backward"
        base = Node if ns.get("_builtin") or cls._array_forward else CustomNode
        cls._node_cls = type(node_name, (base,), {"__slots__": (), "_fn": cls,
                                                  "__module__": cls.__module__})


class Function(metaclass=FunctionMeta):
    """A differentiable operation defined by the user (PyTorch's ``torch.autograd.Function``).

    Subclass it with ``forward(ctx, *args)`` (tensors in, run without recording) and
    ``backward(ctx, *grad_outputs)`` (one gradient per forward input, ``None`` for
    non-tensors), both static methods, then call ``MyFunction.apply(...)``.
    """

    _builtin = True  # Function itself; subclasses defined by users are not
    _array_forward = False  # True for built-in ops (Op): forward gets and returns arrays
    is_view = False  # Op: the output may share memory with input 0
    # Positions of arguments that, given as Python numbers, PyTorch wraps in tensors: they get a
    # ``(None, 0)`` entry in ``next_functions`` as in PyTorch (``x * 2``).
    number_inputs: tuple = ()

    @staticmethod
    def forward(ctx: Any, *args: Any) -> Any:
        raise NotImplementedError("a Function subclass must implement forward(ctx, *args)")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError("a Function subclass must implement backward(ctx, *grads)")

    @classmethod
    def apply(cls, *args: Any) -> Any:
        """Run ``forward``; record its node as the outputs' grad_fn when grad mode is on,
        inference mode off and an input requires grad (for built-in ops and user Functions
        alike). The forward's ctx is the node in both cases; unrecorded, it is dropped."""
        flags = _mode()
        arrays = []
        record = False
        if flags == GRAD:  # grad mode on, not inference mode: look for edges
            nexts = []
            needs = []
            for a in args:
                if isinstance(a, Tensor):
                    arrays.append(a._data)
                    if a._requires_grad:
                        nexts.append(next_entry(a))
                        needs.append(True)
                        record = True
                        continue
                    nexts.append(None)
                else:
                    arrays.append(a)
                    nexts.append(False)
                needs.append(False)
        else:
            for a in args:
                arrays.append(a._data if isinstance(a, Tensor) else a)
        node = _new(cls._node_cls)
        if not record:  # the fast path: no edges, nothing saved
            if not cls._array_forward:  # (PyTorch's user Functions see requires_grad here)
                node.needs_input_grad = tuple(isinstance(a, Tensor) and a._requires_grad
                                              for a in args)
                with no_grad():
                    out = cls.forward(node, *args)
                return release_inputs(node, out, args)
            n = len(args)
            node.needs_input_grad = _NO_NEEDS[n] if n < 33 else (False,) * n
            out = cls.forward(node, *arrays)
            if out.__class__ is tuple:
                return tuple(_output(cls, None, o, arrays, args, flags, i)
                             for i, o in enumerate(out))
            return _output(cls, None, out, arrays, args, flags, 0)
        node._next = tuple(nexts)
        node.needs_input_grad = tuple(needs)
        node._seq = next(_seq)
        node._saved = None
        if anomaly.state.enabled:
            node._trace = traceback.extract_stack()[:-1]
            node._plain = False
        if not cls._array_forward:
            with no_grad():
                out = cls.forward(node, *args)
            return adopt_outputs(node, out, args)
        out = cls.forward(node, *arrays)
        if out.__class__ is tuple:
            node._n_out = len(out)
            results = tuple(_output(cls, node, o, arrays, args, flags, i)
                            for i, o in enumerate(out))
            outs = results
        else:
            results = _output(cls, node, out, arrays, args, flags, 0)
            outs = (results,)
            out = (out,)
        if node._saved is not None:
            node._saved = _resolve_saved(node._saved, args, out, outs)
        return results


class Op(Function):
    """A built-in operation: ``forward(ctx, *args)`` gets numpy arrays for tensor arguments
    and returns a new array (or a tuple of them for several outputs), a view of input 0 (set
    ``is_view = True``), or an input array itself; never an array it keeps elsewhere, since
    the engine may hand a result computed during backward to ``.grad`` as it is.

    ``ctx.save_for_backward`` takes arrays: an input's array saves that input tensor, a
    returned array saves that output, any other array is saved as a constant; other values
    (such as tuples of indices) are kept as they are. Whatever the backward needs beyond small
    Python values (shapes, dims, flags on ctx) goes there, so it is released after backward.
    """

    node_name = "OpBackward0"
    _array_forward = True


def _output(cls: type, node: Node | None, o: Any, arrays: list, args: tuple, flags: int,
            nr: int) -> Tensor:
    """Output ``nr`` of a built-in op: with ``node`` (recorded), its grad_fn (when the dtype
    is a float one); without, its array marked owned when new (not a view, not an input
    array: see ``accumulate_grad``)."""
    if o.__class__ is not _ndarray:
        o = np.asarray(o)  # numpy returns 0-d results as scalars
    t = _new(Tensor)
    t._data = o
    if node is None:
        t._requires_grad = False
        t._grad_fn = None
        owned = o.base is None
        if owned:
            for x in arrays:
                if x is o:
                    owned = False
                    break
        t._owned = owned
    else:
        t._owned = False
        dtype = o.dtype
        if dtype is _FLOAT32 or dtype.kind == "f":  # integer and bool results are not
            t._requires_grad = True  # differentiable
            t._grad_fn = node
            if nr:
                t._output_nr = nr
        else:
            t._requires_grad = False
            t._grad_fn = None
    if cls.is_view and views.is_view_of(t, args[0]):
        views.share_view(t, cls, args, flags & INFERENCE, nr)
    elif flags & INFERENCE:
        t._inference = True
    return t


def _resolve_saved(saved: tuple, args: tuple, raw_outs: tuple, outs: tuple) -> tuple:
    """An Op's saved values as entries: an input's array saves that input, an output's array
    that output, another array a constant; other values are kept as they are."""
    stack = _saved.HOOKS.get()
    hooks = stack[-1] if stack else None
    entries = []
    for s in saved:
        if s is None:
            entries.append(None)
            continue
        for a in args:
            if isinstance(a, Tensor) and a._data is s:  # an input's array saves that input
                entries.append(_saved.save_tensor(a, None, hooks))
                break
        else:
            for i, (o, t) in enumerate(zip(raw_outs, outs)):
                if s is o or s is t._data:
                    entries.append(_saved.save_tensor(t, i if t._grad_fn is not None else None,
                                                      hooks))
                    break
            else:
                if isinstance(s, Tensor):
                    entries.append(_saved.save_tensor(s, None, hooks))
                elif isinstance(s, (_ndarray, np.generic)):  # a constant: version 0
                    entries.append(_saved.save_tensor(wrap(np.asarray(s)), None, hooks))
                else:
                    entries.append(s)
    return tuple(entries)


_new = object.__new__
FunctionCtx = Node
