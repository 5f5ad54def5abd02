"""Nodes of the backward graph and ``Function.apply``, the one place where graphs are recorded.

A ``Function`` subclass describes one differentiable operation (forward and backward as static
methods). ``apply`` runs the forward and, when grad mode is on and an input requires grad,
creates the node (the ``grad_fn`` of the outputs) that also serves as the ``ctx`` of both
methods, as in PyTorch. Built-in operations subclass :class:`Op`, whose forward works on numpy
arrays; user-defined functions subclass :class:`Function`, whose forward gets tensors.
Backward methods always work on tensors, so the same formula serves double backward.
"""

from __future__ import annotations

import itertools
import traceback
from typing import Any

import numpy as np

from ..utils.hooks import HookRegistry, RemovableHandle, register
from . import anomaly
from .grad_mode import GRAD, INFERENCE
from .grad_mode import mode as _mode_flags
from .tensor import Tensor, VersionCounter, wrap

__all__ = ["Function", "Op", "Node", "AccumulateGrad", "FunctionCtx"]

_seq = itertools.count()
_ndarray = np.ndarray  # a module global: numpy's module __getattr__ makes np.ndarray slow
_FLOAT32 = np.dtype(np.float32)
_FREED = object()   # saved tensors were released after a backward without retain_graph


def saved_entry(t: Tensor) -> Any:
    """A tensor saved for backward: ``(tensor, version when saved)``, or the tensor alone when
    it has no version counter yet (version 0; an in-place change creates one and moves past
    0): one object less per saved tensor for the garbage collector to track. (The output is
    saved as ``(None, data, version counter, version, output_nr)`` to avoid a reference
    cycle.)"""
    vc = t._vc
    return t if vc is None else (t, vc.value)


class Node:
    """A node of the backward graph (a ``grad_fn``); also the ``ctx`` of its Function.

    ``next_functions`` lists, per input, ``(node, output_nr)`` of the input's own node or
    ``(None, 0)`` for inputs that need no gradient. Internally, ``_next`` holds per input
    None, the node itself for output 0 (the common case), or ``(node, output_nr)``: one
    object fewer per op for the garbage collector to track.
    """

    __slots__ = ("_next", "_seq", "_saved", "needs_input_grad", "__dict__", "__weakref__")

    _fn: Any = None  # the Function class this node runs the backward of
    # Rarely used state: class-level defaults, set on an instance only when needed.
    _hooks_t: dict | None = None      # output_nr -> tensor hooks of that output
    _retain: dict | None = None       # output_nr -> weakref of a tensor that retains grad
    _pre_hooks: HookRegistry | None = None
    _post_hooks: HookRegistry | None = None
    _trace: Any = None                # forward stack, recorded in anomaly mode
    _n_out = 1
    _plain = True  # False once any of the above is set: the engine then takes its slow path
    _ctx_in_slots = False  # True for ops that keep everything on ctx in ``ctx_fields`` slots

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"

    @property
    def next_functions(self) -> tuple:
        return tuple((None, 0) if e is None else e if e.__class__ is tuple else (e, 0)
                     for e in self._next)

    @property
    def metadata(self) -> dict:
        return self.__dict__.setdefault("_metadata", {})

    # -- ctx API (PyTorch's FunctionCtx) -------------------------------------------------
    def save_for_backward(self, *tensors: Any) -> None:
        self._saved = tensors  # resolved by apply() once the outputs exist

    @property
    def saved_tensors(self) -> tuple:
        saved = self._saved
        if saved is _FREED:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Saved intermediate values of the "
                "graph are freed when you call .backward() or autograd.grad(). Specify "
                "retain_graph=True if you need to backward through the graph a second time or "
                "if you need to access saved tensors after calling backward. (The saved "
                f"tensors of {self.name()} were freed.)")
        if not saved:
            return ()
        out = []
        for s in saved:  # the common case inline: a tensor whose version is unchanged
            if s is None:  # an input whose gradient was not needed (see Mul)
                out.append(None)
            elif isinstance(s, Tensor):  # saved at version 0 (see saved_entry)
                vc = s._vc
                if vc is not None and vc.value:
                    self._version_error(s._data, vc.value, 0, s._output_nr, s._grad_fn)
                out.append(s)
            elif s.__class__ is tuple and s[0] is not None:
                t = s[0]
                vc = t._vc
                if vc is not None and vc.value != s[1]:
                    self._version_error(t._data, vc.value, s[1], t._output_nr, t._grad_fn)
                out.append(t)
            elif s.__class__ is not tuple:  # a raw value, kept as it is
                out.append(s)
            else:
                out.append(self._unpack_output(s))
        return tuple(out)

    def _unpack_output(self, s: tuple) -> Tensor:
        """The saved output, ``(None, data, version counter, version, output_nr)``, as a
        tensor of this node (saved without the tensor to avoid a reference cycle)."""
        _, data, vc, version, nr = s
        if vc.value != version:
            self._version_error(data, vc.value, version, nr)
        t = wrap(data)
        t._requires_grad = True
        t._grad_fn = self
        if nr:
            t._output_nr = nr
        t._vc = vc
        return t

    def _version_error(self, data: np.ndarray, now: int, expected: int, nr: int,
                       owner: Any = "self") -> None:
        owner = self if owner == "self" else owner
        what = f"which is output {nr} of {owner.name().removesuffix('Backward0')}, " \
            if owner is not None else ""
        from .dtypes import as_dtype
        shape = ", ".join(str(d) for d in data.shape)
        hint = ("Hint: the backtrace further above shows the operation that failed to compute "
                "its gradient. The variable in question was changed in there or anywhere later. "
                "Good luck!" if anomaly.state.enabled else
                "Hint: enable anomaly detection to find the operation that failed to compute its "
                "gradient, with gradlog.autograd.set_detect_anomaly(True).")
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [gradlog.{as_dtype(data.dtype).legacy_name} [{shape}]], {what}"
            f"is at version {now}; expected version {expected} instead. {hint}")

    def mark_non_differentiable(self, *tensors: Any) -> None:
        self.__dict__["_non_diff"] = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self.__dict__["_materialize"] = bool(value)

    def mark_dirty(self, *tensors: Any) -> None:
        self.__dict__["_dirty"] = tensors

    # -- node hooks (grad_fn.register_hook / register_prehook) ------------------------------
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

    # -- called by the engine ------------------------------------------------------------
    def _run_backward(self, grads: list) -> tuple:
        if self._saved is _FREED:
            _ = self.saved_tensors  # raises the "second time" error
        out = self._fn.backward(self, *grads)
        if type(out) is not tuple:
            out = (out,)
        return out

    def _release(self) -> None:
        """After a backward without ``retain_graph``: free the saved tensors, and the arrays a
        built-in op kept on ctx for its backward (masks, indices, statistics: what PyTorch
        would have saved), so that a graph still referenced (by the loss) holds no buffers.
        A second backward through this node then raises the "second time" error.
        (``ctx_fields`` slots are for small values and are not searched.)"""
        if self._saved is not None:
            self._saved = _FREED
        fields = self.__dict__
        if fields:
            dropped = [k for k, v in fields.items() if _holds_arrays(v)]
            if dropped:
                for k in dropped:
                    del fields[k]
                self._saved = _FREED


_PLAIN = frozenset({int, float, bool, str, type(None), slice, complex, type(Ellipsis)})


def _holds_arrays(value: Any, record: bool = True) -> bool:
    """Whether a ctx attribute refers to arrays or tensors (itself, in tuples or lists, or in
    the fields of a small record such as cross-entropy's targets)."""
    cls = value.__class__
    if cls in _PLAIN:
        return False
    if cls is tuple or cls is list:
        for v in value:
            if v.__class__ not in _PLAIN and _holds_arrays(v, record):
                return True
        return False
    if cls is np.ndarray or isinstance(value, Tensor):
        return True
    if not record or cls.__module__ == "numpy" or isinstance(value, type):
        return False
    fields = list(getattr(value, "__dict__", {}).values())
    fields += [getattr(value, s, None) for c in cls.__mro__ for s in getattr(c, "__slots__", ())
               if isinstance(s, str)]
    return any(_holds_arrays(v, False) for v in fields)


def _new_node(node_cls: type, nexts: tuple, needs: tuple) -> Node:
    node = _new(node_cls)
    node._next = nexts
    node._seq = next(_seq)
    node._saved = None
    node.needs_input_grad = needs
    if anomaly.state.enabled:
        node._trace = traceback.extract_stack()[:-3]
        node._plain = False
    return node


_new = object.__new__
ACC_SEQ = 1 << 62  # leaf sinks run as soon as they are ready (as PyTorch's AccumulateGrad)


class AccumulateGrad(Node):
    """The sink of a leaf that requires grad: runs its hooks and adds into ``.grad``."""

    __slots__ = ("variable",)
    _plain = False

    def __init__(self, variable: Tensor) -> None:
        self._next = ()
        self._seq = ACC_SEQ
        self._saved = None
        self.needs_input_grad = ()
        self.variable = variable


def next_entry(t: Tensor) -> Any:
    """The ``_next`` entry of an input that requires grad: its node, or ``(node, output_nr)``
    for an output other than the first (see Node)."""
    fn = t._grad_fn
    if fn is None:
        return t._grad_acc or _accumulator(t)
    nr = t._output_nr
    return fn if nr == 0 else (fn, nr)


def edge_of(t: Tensor) -> tuple:
    """The graph edge a tensor that requires grad feeds, ``(node, output_nr)``: its grad_fn
    or its leaf sink."""
    entry = next_entry(t)
    return entry if entry.__class__ is tuple else (entry, 0)


class _NoGradCtx:
    """The ctx forward gets when no graph is recorded: saving and marking do nothing."""

    __slots__ = ("needs_input_grad",)

    def __init__(self, n: int) -> None:
        self.needs_input_grad = (False,) * n

    def __setattr__(self, key: str, value: Any) -> None:
        if key == "needs_input_grad":
            object.__setattr__(self, key, value)

    def save_for_backward(self, *tensors: Any) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Any) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        pass

    def mark_dirty(self, *tensors: Any) -> None:
        pass


_NO_CTX = [_NoGradCtx(n) for n in range(32)]


class FunctionMeta(type):
    """Gives every Function subclass its node class, named ``<Name>Backward`` as in PyTorch."""

    def __init__(cls, name: str, bases: tuple, ns: dict) -> None:
        super().__init__(name, bases, ns)
        node_name = ns.get("node_name") or f"{name}Backward"
        base = Node
        if not ns.get("_builtin") and not getattr(cls, "_array_forward", False):
            from .custom import CustomNode  # user-defined Function: checked backward
            base = CustomNode
        # ``ctx_fields``: names an op stores on ctx; slots are cheaper than the node's __dict__
        fields = tuple(getattr(cls, "ctx_fields", ()))
        # ``_backward``: the backward as a method of the node (its ctx), for the engine's
        # fast path: one attribute lookup instead of two
        cls._node_cls = type(node_name, (base,), {"__slots__": fields, "_fn": cls,
                                                  "_backward": cls.backward,
                                                  "_ctx_in_slots": bool(fields),
                                                  "__module__": cls.__module__})


class Function(metaclass=FunctionMeta):
    """A differentiable operation defined by the user (PyTorch's ``torch.autograd.Function``).

    Subclass it with ``forward(ctx, *args)`` (tensors in, run without recording) and
    ``backward(ctx, *grad_outputs)`` (one gradient per forward input, ``None`` for
    non-tensors), both static methods, then call ``MyFunction.apply(...)``.
    """

    _builtin = True  # Function itself; subclasses defined by users are not

    @staticmethod
    def forward(ctx: Any, *args: Any) -> Any:
        raise NotImplementedError("a Function subclass must implement forward(ctx, *args)")

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        raise NotImplementedError("a Function subclass must implement backward(ctx, *grads)")

    @classmethod
    def apply(cls, *args: Any) -> Any:
        from .custom import apply_custom
        return apply_custom(cls, args)


class Op(Function):
    """A built-in operation: ``forward(ctx, *args)`` gets numpy arrays for tensor arguments.

    ``ctx.save_for_backward`` takes arrays: an input's array saves that input tensor, the
    returned array saves the output, any other array is saved as a constant.
    Set ``is_view = True`` for operations whose output may share memory with input 0.
    """

    node_name = "OpBackward0"
    is_view = False
    _array_forward = True
    # Optional: the output from the arrays alone (e.g. ``np.multiply``), used when nothing is
    # recorded; ``forward`` must compute the same values (it also saves what backward needs).
    compute: Any = None

    @classmethod
    def apply(cls, *args: Any) -> Tensor:
        # One pass over the arguments collects the arrays and, for inputs that require grad,
        # the graph edges; nothing else is done unless a graph is recorded.
        requires = False
        flags = _mode_flags()
        if flags == GRAD:  # grad mode on, not in inference mode
            arrays = []
            nexts = []
            needs = []
            for a in args:
                if isinstance(a, Tensor):
                    arrays.append(a._data)
                    if a._requires_grad:
                        requires = True
                        fn = a._grad_fn
                        if fn is None:
                            nexts.append(a._grad_acc or _accumulator(a))
                        else:  # (see next_entry)
                            nr = a._output_nr
                            nexts.append(fn if nr == 0 else (fn, nr))
                        needs.append(True)
                        continue
                else:
                    arrays.append(a)
                nexts.append(None)
                needs.append(False)
        else:  # the path every op inside a backward pass takes (a loop: cheaper than a
            arrays = []  # comprehension, which is a function call in Python 3.11)
            for a in args:
                arrays.append(a._data if isinstance(a, Tensor) else a)
        if not requires:
            compute = cls.compute
            if compute is not None:  # nothing to record: just the values
                out = compute(*arrays)
            else:
                n = len(args)
                out = cls.forward(_NO_CTX[n] if n < 32 else _NoGradCtx(n), *arrays)
            if out.__class__ is not _ndarray:
                out = np.asarray(out)
            t = _new(Tensor)
            t._data = out
            t._requires_grad = False
            t._grad_fn = None
            if flags & INFERENCE:
                t._inference = True
            elif cls.is_view:
                _share_view(t, cls, args)
            return t
        node = _new(cls._node_cls)
        node._next = tuple(nexts)
        node._seq = next(_seq)
        node._saved = None
        node.needs_input_grad = tuple(needs)
        if anomaly.state.enabled:
            node._trace = traceback.extract_stack()[:-2]
            node._plain = False
        out = cls.forward(node, *arrays)
        return _output_of(cls if cls.is_view else None, node, out, args)

    @classmethod
    def binary_recorder(cls) -> Any:
        """``record(a, b)``: ``apply(a, b)`` for two tensors when a graph is recorded, at
        least one of them requiring grad, without the loops over arguments and with the
        class attributes looked up once (the hot path of elementwise arithmetic, whose ops
        return arrays)."""
        node_cls = cls._node_cls
        forward = cls.forward
        view_op = cls if cls.is_view else None

        def record(a: Tensor, b: Tensor) -> Tensor:
            na = a._requires_grad
            nb = b._requires_grad
            node = _new(node_cls)
            fa = a._grad_fn  # next_entry(a) and next_entry(b), inline
            fb = b._grad_fn
            node._next = (((a._grad_acc or _accumulator(a)) if fa is None else
                           fa if a._output_nr == 0 else (fa, a._output_nr)) if na else None,
                          ((b._grad_acc or _accumulator(b)) if fb is None else
                           fb if b._output_nr == 0 else (fb, b._output_nr)) if nb else None)
            node._seq = next(_seq)
            node._saved = None
            node.needs_input_grad = _NEEDS[na + 2 * nb]  # shared tuples: no allocation
            if anomaly.state.enabled:
                node._trace = traceback.extract_stack()[:-2]
                node._plain = False
            return _output_of(view_op, node, forward(node, a._data, b._data), (a, b))

        return record


_NEEDS = ((False, False), (True, False), (False, True), (True, True))


def _output_of(view_op: type | None, node: Node, out: Any, args: tuple) -> Tensor:
    """The output tensor of a recorded op, with the node's saved values resolved: an input's
    array saves that input, the output's array the output, anything else a constant.
    ``view_op``: the op when it is a view op (``is_view``), else None."""
    if out.__class__ is not _ndarray:
        scalar, out = out, np.asarray(out)
        if node._saved is not None:  # numpy returns 0-d results as scalars: a saved
            # scalar that is the result must be saved as the output, not as a constant
            node._saved = tuple(out if s is scalar else s for s in node._saved)
    t = _new(Tensor)
    t._data = out
    dtype = out.dtype
    if dtype is not _FLOAT32 and dtype.kind != "f":  # integer and bool results are not
        t._requires_grad = False  # differentiable
        t._grad_fn = None
        return t
    t._requires_grad = True
    t._grad_fn = node
    if view_op is not None:
        _share_view(t, view_op, args)
    saved = node._saved
    if saved is not None:
        entries = []
        for s in saved:
            if s is None:
                entries.append(None)
            elif s.__class__ is _ndarray:
                for a in args:  # an input's array saves that input tensor
                    if isinstance(a, Tensor) and a._data is s:
                        if a._inference:
                            _inference_saved_error()
                        vc = a._vc
                        entries.append(a if vc is None else (a, vc.value))  # saved_entry
                        break
                else:
                    entries.append(_resolve_other(s, out, t))
            else:
                entries.append(_resolve_other(s, out, t))
        node._saved = tuple(entries)
    return t


def _accumulator(t: Tensor) -> AccumulateGrad:
    acc = t._grad_acc = AccumulateGrad(t)
    return acc


def _inference_saved_error() -> None:
    raise RuntimeError(
        "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
        "inference mode in computation tracked by autograd. To work around this, you can make "
        "a clone to get a normal tensor and use it in autograd, or use `gradlog.no_grad()` "
        "instead of `gradlog.inference_mode()`.")


def _resolve_other(s: Any, out: np.ndarray, t: Tensor) -> Any:
    """A saved value that is not an input: the output, a tensor, a constant array, or a raw
    Python value (kept as it is)."""
    if s is out:
        vc = t._vc
        if vc is None:
            vc = t._vc = VersionCounter()
        return (None, out, vc, vc.value, 0)
    if isinstance(s, Tensor):
        return saved_entry(s)
    if isinstance(s, np.ndarray):
        return wrap(s)  # a constant: version 0 (see saved_entry)
    return s


def _share_view(out: Tensor, cls: type, args: tuple) -> None:
    """An output that shares memory with its input is a view: it shares the input's version
    counter and records how to recreate it from the root base (for in-place ops on views)."""
    src = args[0]
    if np.may_share_memory(out._data, src._data):
        vc = src._vc
        if vc is None:
            vc = src._vc = VersionCounter()
        out._vc = vc
        if src._base is not None:
            out._base = src._base
            out._view_chain = src._view_chain + ((cls, args[1:]),)
        else:
            out._base = src
            out._view_chain = ((cls, args[1:]),)


FunctionCtx = Node
