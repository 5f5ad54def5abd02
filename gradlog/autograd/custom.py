"""``Function.apply`` for user-defined autograd Functions (forward gets tensors)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .function import _FREED, Node, _new_node, next_entry, saved_entry
from .grad_mode import no_grad
from .grad_mode import state as _mode
from .tensor import Tensor, wrap


def apply_custom(cls: type, args: tuple) -> Any:
    needs = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
    record = _mode.grad_enabled and any(needs)
    node = _new_node(cls._node_cls, tuple(next_entry(a) if n else None
                                          for a, n in zip(args, needs)), needs)
    node.__dict__["_materialize"] = True
    with no_grad():
        out = cls.forward(node, *args)
    single = not isinstance(out, tuple)
    outs = (out,) if single else out
    if not record:
        return out
    non_diff = node.__dict__.get("_non_diff", ())
    results = []
    metas = []
    for i, o in enumerate(outs):
        if not isinstance(o, Tensor):
            results.append(o)
            metas.append(None)
            continue
        if any(o is a for a in args):  # an input returned as-is: give a new tensor object
            o = wrap(o._data)
        if any(o is nd for nd in non_diff) or o._data.dtype.kind != "f":
            metas.append((o._data.shape, o._data.dtype))
            results.append(o)
            continue
        o._requires_grad = True
        o._grad_fn = node
        if i:
            o._output_nr = i
        metas.append((o._data.shape, o._data.dtype))
        results.append(o)
    node._n_out = len(outs)
    node.__dict__["_out_meta"] = metas
    node.__dict__["_in_meta"] = [(a._data.shape, a._data.dtype) if isinstance(a, Tensor)
                                 else None for a in args]
    saved = node._saved
    if saved is not None:
        node._saved = tuple(saved_entry(s) if isinstance(s, Tensor) else s for s in saved)
    return results[0] if single else tuple(results)


class CustomNode(Node):
    """Backward of a user Function: materializes missing grads, checks the returned count
    and shapes (summing broadcastable gradients down to the input's shape)."""

    __slots__ = ()
    _plain = False  # the engine must call _run_backward (materialization, checks)

    def _release(self) -> None:
        # as PyTorch: only what save_for_backward saved is freed; ctx attributes stay
        if self._saved is not None:
            self._saved = _FREED

    def _run_backward(self, grads: list) -> tuple:
        if self.__dict__.get("_materialize", True):
            metas = self.__dict__.get("_out_meta", [])
            grads = [wrap(np.zeros(m[0], dtype=m[1])) if g is None and m is not None else g
                     for g, m in zip(grads, metas)]
        out = Node._run_backward(self, grads)
        n_in = len(self._next)
        if len(out) != n_in:
            raise RuntimeError(f"function {self.name()} returned an incorrect number of "
                               f"gradients (expected {n_in}, got {len(out)})")
        metas = self.__dict__.get("_in_meta", [])
        fixed = []
        for i, (g, m) in enumerate(zip(out, metas)):
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
