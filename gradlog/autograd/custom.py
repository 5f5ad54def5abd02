"""User-defined Functions: their outputs and saved tensors, and their checked backward.

``Function.apply`` records user Functions as it records built-in ops; what differs is that
their forward gets and returns tensors, so an input returned as it is must become a new tensor
object (a view), an input marked dirty is rebased onto the node, and their backward (user
code) is checked: the number of gradients, their type and shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import saved as _saved
from .node import Node, rebase
from .tensor import Tensor, wrap

__all__ = ["CustomNode", "adopt_outputs", "release_inputs"]


def _among(t: Any, group: tuple) -> bool:
    for x in group:
        if x is t:
            return True
    return False


def _view_alias(t: Tensor) -> Tensor:
    """A new tensor object for an input returned as it is: same memory and version counter."""
    out = t.detach()
    if t._inference:
        out._inference = True
    return out


def release_inputs(node: Node, out: Any, args: tuple) -> Any:
    """The outputs of a user Function that recorded nothing."""
    single = not isinstance(out, tuple)
    results = []
    for o in ((out,) if single else out):
        if isinstance(o, Tensor) and _among(o, args):
            if _among(o, node.__dict__.get("_dirty", ())):
                o._bump_version()
            else:
                o = _view_alias(o)
        results.append(o)
    return results[0] if single else tuple(results)


def adopt_outputs(node: Node, out: Any, args: tuple) -> Any:
    """The outputs of a recorded user Function, with ``node`` as their grad_fn."""
    single = not isinstance(out, tuple)
    outs = (out,) if single else out
    fields = node.__dict__
    dirty = fields.get("_dirty", ())
    non_diff = fields.get("_non_diff", ())
    results = []
    metas = []
    for i, o in enumerate(outs):
        if not isinstance(o, Tensor):
            results.append(o)
            metas.append(None)
            continue
        differentiable = not _among(o, non_diff) and o._data.dtype.kind == "f"
        if _among(o, dirty):
            if o._requires_grad and o._grad_fn is None:
                raise RuntimeError("a leaf Variable that requires grad has been used in an "
                                   "in-place operation.")
            o._bump_version()
            if differentiable:
                rebase(o, node, i)
        else:
            if _among(o, args):
                o = _view_alias(o)
            if differentiable:
                o._requires_grad = True
                o._grad_fn = node
                if i:
                    o._output_nr = i
        metas.append((o._data.shape, o._data.dtype))
        results.append(o)
    node._n_out = len(outs)
    fields["_out_meta"] = metas
    fields["_in_meta"] = [(a._data.shape, a._data.dtype) if isinstance(a, Tensor) else None
                          for a in args]
    if node._saved is not None:
        node._saved = _save_tensors(node, results)
    return results[0] if single else tuple(results)


def _save_tensors(node: Node, results: list) -> tuple:
    hooks = _saved.current_hooks()
    entries = []
    for i, s in enumerate(node._saved):
        if s is None:
            entries.append(None)
        elif not isinstance(s, Tensor):
            raise TypeError(f"save_for_backward can only save variables, but argument {i} is "
                            f"of type {type(s).__name__}")
        else:
            nr = next((k for k, r in enumerate(results) if r is s and s._grad_fn is node), None)
            entries.append(_saved.save_tensor(s, nr, hooks))
    return tuple(entries)


class CustomNode(Node):
    """Backward of a user Function: materializes missing gradients as zeros (unless the
    forward said ``ctx.set_materialize_grads(False)``), checks what it returned (count, type,
    shape: a broadcastable gradient is summed down to the input's shape)."""

    __slots__ = ()
    _materialize = True
    _plain = False  # its backward is user code: the engine disowns what it sees and returns

    def _apply(self, grads: list) -> tuple:
        fields = self.__dict__
        if fields.get("_materialize", True):
            grads = [wrap(np.zeros(m[0], dtype=m[1])) if g is None and m is not None else g
                     for g, m in zip(grads, fields.get("_out_meta", ()))]
        out = Node._apply(self, grads)
        fixed = []
        for i, (g, m) in enumerate(zip(out, fields.get("_in_meta", ()))):
            if g is not None and m is not None and self.needs_input_grad[i]:
                if not isinstance(g, Tensor):
                    raise TypeError(f"function {self.name()} returned a gradient of type "
                                    f"{type(g).__name__} at index {i}, expected a Tensor")
                if g._data.shape != m[0]:
                    g = _sum_to(g, m[0], self.name(), i)
            fixed.append(g)
        return tuple(fixed)


def _sum_to(g: Tensor, shape: tuple, name: str, i: int) -> Tensor:
    from .ops._util import unbroadcast
    try:
        if np.broadcast_shapes(g._data.shape, shape) == g._data.shape:
            return unbroadcast(g, shape)
    except ValueError:
        pass
    raise RuntimeError(f"Function {name} returned an invalid gradient at index {i} - got "
                       f"{list(g._data.shape)} but expected shape compatible with {list(shape)}")
