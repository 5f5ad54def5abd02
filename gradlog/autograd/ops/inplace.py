"""In-place operations (``add_``, ``mul_``, ``clamp_``, ``copy_``, ``t[idx] = v``, ...).

Without a graph to record (grad mode off, or nothing requires grad) they write straight into
the tensor's array. Otherwise the result is computed out of place with the ordinary op, written
back into the same memory, and the tensor is rebased onto the op's node, as PyTorch does. An
in-place op on a view also rebases the view's base (``CopySlices``), so gradients through the
base see the change. Either way the version counter (shared with views) goes up by one.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .. import saved as _saved
from ..function import Op
from ..grad_mode import GRAD
from ..grad_mode import mode as _mode_flags
from ..grad_mode import state as _mode
from ..node import grad_fn_of, rebase
from ..tensor import Tensor, wrap
from ..views import check_inplace_on_view, replay
from ._util import check_broadcast, check_cast, scalar_type_name

__all__ = ["apply_inplace"]


def _needs_graph(self: Tensor, others: tuple) -> bool:
    if not _mode.grad_enabled:
        return False
    if self._requires_grad or (self._base is not None and self._base._requires_grad):
        return True
    return any(isinstance(o, Tensor) and o._requires_grad for o in others)


def apply_inplace(self: Tensor, fast: Any, graph: Any, others: tuple = ()) -> Tensor:
    """Run an in-place op: ``fast(array)`` writes into the array when no graph is needed;
    ``graph(tensor) -> Tensor`` computes the result out of place otherwise."""
    self._check_inplace(others)
    if not _needs_graph(self, others):
        try:
            fast(self._data)
        except (TypeError, ValueError) as exc:
            raise RuntimeError(_cast_message(exc, self, others)) from None
        self._bump_version()
        return self
    if self._base is not None:
        check_inplace_on_view(self)
        return _inplace_on_view(self, graph)
    result = _compute(self, _alias(self), graph)
    _rebase(self, result)
    return self


def _alias(t: Tensor) -> Tensor:
    """A tensor object standing for ``t``'s value before the in-place op (same graph place)."""
    old = wrap(t._data)
    old._requires_grad = t._requires_grad
    old._grad_fn = grad_fn_of(t)
    if t._output_nr:
        old._output_nr = t._output_nr
    if t._grad_fn is None and t._requires_grad:
        old._grad_acc = t._grad_acc
    return old


def _compute(self: Tensor, old: Tensor, graph: Any) -> Tensor:
    """``graph(old)`` out of place, written into ``self``'s memory (version bumped)."""
    result = graph(old)
    if result._data.shape != self._data.shape:
        raise RuntimeError(f"output with shape {list(self._data.shape)} doesn't match the "
                           f"broadcast shape {list(result._data.shape)}")
    node = result._grad_fn
    if node is not None and type(node._saved) is tuple:
        if any(s is old or (type(s) is _saved.SavedTensor and s.tensor is old)
               for s in node._saved):
            old._data = old._data.copy()  # the node needs the old value: keep it
    check_cast(result._data.dtype, self._data.dtype)
    np.copyto(self._data, result._data, casting="unsafe")
    self._bump_version()
    return result


def _rebase(self: Tensor, result: Tensor) -> None:
    """Make ``self`` the output of ``result``'s node (its old hooks stay with the old node)."""
    node = result._grad_fn
    if node is None:
        return
    rebase(self, node, result._output_nr)
    # the node saved its output's array: point it at self's memory, so that later in-place
    # changes of self are caught by the version check
    if type(node._saved) is tuple:
        vc = self._vc
        for s in node._saved:
            if type(s) is _saved.SavedTensor and s.own_output and s.unpack_hook is None:
                s.data, s.vc, s.version = self._data, vc, vc.value


class CopySlices(Op):
    """The base of a view that was changed in place: gradient flows to the old base outside
    the view's region, and to the new view values inside it."""

    node_name = "CopySlices"

    @staticmethod
    def forward(ctx, base, view_values, chain):
        ctx.chain = chain
        ctx.base_shape = base.shape
        return base  # the memory was already written through the view

    @staticmethod
    def backward(ctx, g):
        keep = np.ones(ctx.base_shape, dtype=g._data.dtype)
        replay_array(keep, ctx.chain)[...] = 0
        from .activation import MaskMul
        return MaskMul.apply(g, keep), replay(g, ctx.chain), None


def replay_array(a: np.ndarray, chain: tuple) -> np.ndarray:
    """The view ``chain`` describes, of a plain array."""
    t = wrap(a)
    for cls, args, nr in chain:
        t = cls.apply(t, *args)
        if nr or t.__class__ is tuple:
            t = t[nr]
    return t._data


def _inplace_on_view(self: Tensor, graph: Any) -> Tensor:
    """An in-place op on a view: the op applies to a fresh view of the old base (so the view's
    previous node, and the hooks on it, are off the new path, as in PyTorch), the base becomes
    the output of ``CopySlices``, and the view is recreated from the new base."""
    base = self._base
    chain = self._view_chain
    old_base = _alias(base)
    result = _compute(self, replay(old_base, chain), graph)
    new_base = CopySlices.apply(old_base, result, chain)
    rebase(base, new_base._grad_fn, 0)
    fresh = replay(base, chain)
    rebase(self, fresh._grad_fn, fresh._output_nr)
    return self


def _cast_message(exc: Exception, t: Tensor, others: tuple) -> str:
    """PyTorch's message for numpy's error in an in-place op."""
    text = str(exc)
    if "Cannot cast ufunc" in text or "casting rule" in text:
        return (f"result type Float can't be cast to the desired output type "
                f"{scalar_type_name(t._data.dtype)}")
    if "could not be broadcast" in text:
        check_broadcast(t._data.shape, *(o._data.shape for o in others))
    found = re.match(r"non-broadcastable output operand with shape \(([\d, ]*)\) doesn't match "
                     r"the broadcast shape \(([\d, ]*)\)", text)
    if found:
        out, full = ([int(v) for v in g.split(",") if v.strip()] for g in found.groups())
        return f"output with shape {out} doesn't match the broadcast shape {full}"
    return text



def _raw(x: Any) -> Any:
    return x._data if isinstance(x, Tensor) else x


def _others(*xs: Any) -> tuple:
    return tuple(x for x in xs if isinstance(x, Tensor))


def _applied_without_graph(self: Tensor, ufunc: Any, operand: Any, other: Any) -> bool:
    """Under no_grad nothing can be recorded: apply the ufunc in place at once (the
    optimizers' path). Returns False when the general path must decide."""
    if _mode_flags() & GRAD or self._inference:
        return False
    data = self._data
    try:
        ufunc(data, operand, out=data, casting="same_kind")
    except (TypeError, ValueError) as exc:
        raise RuntimeError(_cast_message(exc, self, _others(other))) from None
    self._bump_version()
    return True


def add_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    o = other._data if other.__class__ is Tensor else other
    if _applied_without_graph(self, np.add, o if alpha == 1 else o * alpha, other):
        return self

    def fast(a: np.ndarray) -> None:
        o = _raw(other)
        np.add(a, o if alpha == 1 else o * alpha, out=a, casting="same_kind")
    return apply_inplace(self, fast, lambda t: t.add(other, alpha=alpha), _others(other))


def sub_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    o = other._data if other.__class__ is Tensor else other
    if _applied_without_graph(self, np.subtract, o if alpha == 1 else o * alpha, other):
        return self

    def fast(a: np.ndarray) -> None:
        o = _raw(other)
        np.subtract(a, o if alpha == 1 else o * alpha, out=a, casting="same_kind")
    return apply_inplace(self, fast, lambda t: t.sub(other, alpha=alpha), _others(other))


def mul_(self: Tensor, other: Any) -> Tensor:
    if _applied_without_graph(self, np.multiply,
                              other._data if other.__class__ is Tensor else other, other):
        return self

    def fast(a: np.ndarray) -> None:
        np.multiply(a, _raw(other), out=a, casting="same_kind")
    return apply_inplace(self, fast, lambda t: t.mul(other), _others(other))


def div_(self: Tensor, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    def fast(a: np.ndarray) -> None:
        if rounding_mode is None:
            np.true_divide(a, _raw(other), out=a, casting="same_kind")
        else:
            np.copyto(a, self.div(other, rounding_mode=rounding_mode)._data, casting="same_kind")
    return apply_inplace(self, fast, lambda t: t.div(other, rounding_mode=rounding_mode),
                         _others(other))


def pow_(self: Tensor, exponent: Any) -> Tensor:
    def fast(a: np.ndarray) -> None:
        np.power(a, _raw(exponent), out=a, casting="same_kind")
    return apply_inplace(self, fast, lambda t: t.pow(exponent), _others(exponent))


def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")

    def fast(a: np.ndarray) -> None:
        np.clip(a, _raw(min), _raw(max), out=a, casting="same_kind")
    return apply_inplace(self, fast, lambda t: t.clamp(min, max), _others(min, max))


def _unary_inplace(name: str, ufunc: Any) -> Any:
    def method(self: Tensor) -> Tensor:
        def fast(a: np.ndarray) -> None:
            ufunc(a, out=a)
        return apply_inplace(self, fast, lambda t: getattr(t, name)())
    method.__name__ = name + "_"
    return method


def relu_(self: Tensor) -> Tensor:
    def fast(a: np.ndarray) -> None:
        np.maximum(a, 0, out=a)
    return apply_inplace(self, fast, lambda t: t.relu())


def sigmoid_(self: Tensor) -> Tensor:
    def fast(a: np.ndarray) -> None:
        np.copyto(a, self.sigmoid()._data)
    return apply_inplace(self, fast, lambda t: t.sigmoid())


def zero_(self: Tensor) -> Tensor:
    """Set every element to 0."""
    return fill_(self, 0)


def fill_(self: Tensor, value: Any) -> Tensor:
    def fast(a: np.ndarray) -> None:
        a[...] = _raw(value)

    def graph(t: Tensor) -> Tensor:
        if isinstance(value, Tensor):
            return (t * 0).add(value.to(t.dtype).expand(t.shape))
        return (t * 0).add(value)
    return apply_inplace(self, fast, graph, _others(value))


def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    """Copy ``src`` (broadcast, cast to this dtype) into this tensor."""
    src_arr = _raw(src)
    try:
        np.broadcast_shapes(np.shape(src_arr), self._data.shape)
    except ValueError:
        raise RuntimeError(f"The size of tensor a ({self._data.shape}) must match the size of "
                           f"tensor b ({np.shape(src_arr)}) for copy_") from None

    def fast(a: np.ndarray) -> None:
        np.copyto(a, src_arr, casting="unsafe")

    def graph(t: Tensor) -> Tensor:
        s = src if isinstance(src, Tensor) else wrap(np.asarray(src_arr))
        return (t * 0).add(s.to(t.dtype).expand(t.shape))
    return apply_inplace(self, fast, graph, _others(src))


def masked_fill_(self: Tensor, mask: Any, value: Any) -> Tensor:
    m = np.asarray(_raw(mask))

    def fast(a: np.ndarray) -> None:
        np.copyto(a, _raw(value), where=np.broadcast_to(m, a.shape))
    return apply_inplace(self, fast, lambda t: t.masked_fill(m, value), _others(value))


def lerp_(self: Tensor, end: Any, weight: Any) -> Tensor:
    def fast(a: np.ndarray) -> None:
        a += (_raw(end) - a) * _raw(weight)
    return apply_inplace(self, fast, lambda t: t + (end - t) * weight, _others(end, weight))


def addcmul_(self: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
    def fast(a: np.ndarray) -> None:
        a += value * (_raw(tensor1) * _raw(tensor2))
    return apply_inplace(self, fast, lambda t: t + tensor1 * tensor2 * value,
                         _others(tensor1, tensor2))


def addcdiv_(self: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
    def fast(a: np.ndarray) -> None:
        a += value * (_raw(tensor1) / _raw(tensor2))
    return apply_inplace(self, fast, lambda t: t + tensor1 / tensor2 * value,
                         _others(tensor1, tensor2))


def _random_fill(self: Tensor, draw: Any) -> Tensor:
    self._check_inplace()
    self._data[...] = draw(self._data.shape).astype(self._data.dtype, copy=False)
    self._bump_version()
    return self


def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Tensor:
    from ..random import rng
    return _random_fill(self, lambda shape: rng(generator).uniform(a, b, shape))


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Tensor:
    from ..random import rng
    return _random_fill(self, lambda shape: rng(generator).normal(mean, std, shape))


def bernoulli_(self: Tensor, p: float = 0.5, *, generator: Any = None) -> Tensor:
    from ..random import rng
    return _random_fill(self, lambda shape: rng(generator).random(shape) < p)


def _iop(method: Any) -> Any:
    def op(self: Tensor, other: Any) -> Tensor:
        return method(self, other)
    return op


TENSOR_METHODS = {
    "add_": add_, "sub_": sub_, "mul_": mul_, "div_": div_, "pow_": pow_, "clamp_": clamp_,
    "clip_": clamp_, "zero_": zero_, "fill_": fill_, "copy_": copy_, "relu_": relu_,
    "sigmoid_": sigmoid_, "masked_fill_": masked_fill_, "lerp_": lerp_, "addcmul_": addcmul_,
    "addcdiv_": addcdiv_, "uniform_": uniform_, "normal_": normal_, "bernoulli_": bernoulli_,
    "exp_": _unary_inplace("exp", np.exp), "sqrt_": _unary_inplace("sqrt", np.sqrt),
    "neg_": _unary_inplace("neg", np.negative), "abs_": _unary_inplace("abs", np.abs),
    "tanh_": _unary_inplace("tanh", np.tanh), "log_": _unary_inplace("log", np.log),
    "__iadd__": _iop(add_), "__isub__": _iop(sub_), "__imul__": _iop(mul_),
    "__itruediv__": _iop(div_), "__ipow__": _iop(pow_),
}
