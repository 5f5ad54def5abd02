"""Views: tensors sharing the memory of another (reshape, transpose, basic indexing, split...).

A view shares its base's version counter and remembers how to recreate itself from its root
base (``_view_chain``: the view ops and their other arguments). When the base, or another view
of it, is changed in place, the view's grad_fn no longer describes its value; it is
regenerated (the chain replayed on the base's new history) the next time it is needed, as
PyTorch does. Two kinds of views cannot be regenerated, with PyTorch's errors: the outputs of
an op that returns several views, and views made in inference or no_grad mode of tensors
that require grad (they require grad too, without a grad_fn or a graph edge, as in PyTorch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .grad_mode import GRAD
from .grad_mode import mode as _mode
from .grad_mode import set_mode as _set_mode
from .tensor import Tensor, VersionCounter

__all__ = ["is_view_of", "share_view", "refresh_view", "replay", "check_inplace_on_view"]


def is_view_of(out: Tensor, src: Any) -> bool:
    return isinstance(src, Tensor) and np.may_share_memory(out._data, src._data)


def share_view(out: Tensor, cls: type, args: tuple, in_inference: int, nr: int = 0) -> None:
    """Make ``out`` (output ``nr`` of the view op ``cls`` applied to ``args``) a view of
    ``args[0]``: the same version counter, and the chain that recreates it from the root base."""
    src = args[0]
    if src._inference:  # a view of an inference tensor is one, and (as in PyTorch) no view
        out._inference = True
        return
    vc = src._vc
    if vc is None:
        vc = src._vc = VersionCounter()
    out._vc = vc
    out._view_version = vc.value
    step = ((cls, args[1:], nr),)
    base = src._base
    # a view made to require grad after its base (which does not) is where autograd starts:
    # the root of its own views, so that in-place changes to them are refused as PyTorch does
    if base is not None and (base._requires_grad or not src._requires_grad):
        out._base = base
        out._view_chain = src._view_chain + step
    else:
        out._base = src
        out._view_chain = step
    if out._base._layout:
        out._base_layout = out._base._layout
    if in_inference:  # a view of a normal tensor stays normal; it keeps requires_grad
        out._requires_grad = src._requires_grad
        out._made_in = "inference"
    elif out._grad_fn is None and src._requires_grad:  # made under no_grad: the same
        out._requires_grad = True
        out._made_in = "no_grad"


def replay(t: Tensor, chain: tuple) -> Tensor:
    """The view ``chain`` describes, applied to ``t`` (recorded when ``t`` requires grad)."""
    for cls, args, nr in chain:
        t = cls.apply(t, *args)
        if nr or t.__class__ is tuple:
            t = t[nr]
    return t


def refresh_view(t: Tensor) -> None:
    """Regenerate the grad_fn of a view whose base changed in place since it was set."""
    vc = t._vc
    if vc.value == t._view_version:
        return
    base = t._base
    if not base._requires_grad:  # nothing to regenerate (a view made to require grad after
        t._view_version = vc.value  # its base is a leaf of its own)
        return
    if t._made_in:
        raise made_in_mode_error(t._made_in, base_changed=True)
    op = _multi_output_op(t)
    if op is not None:
        raise RuntimeError(
            f"Output {t._view_chain[-1][2]} of {op} is a view and its base or another view of "
            "its base has been modified inplace. This view is the output of a function that "
            "returns multiple views. Such functions do not allow the output views to be "
            "modified inplace. You should replace the inplace operation by an out-of-place one.")
    previous = _mode()
    _set_mode(GRAD)  # the regenerated node is recorded whatever the caller's grad mode
    try:
        if t._base_layout == base._layout:
            fresh = replay(base, t._view_chain)
        else:  # the base changed shape in place since (t_, ...): the chain no longer applies
            from .ops.inplace_view import from_storage
            fresh = from_storage(base, t._data)
    finally:
        _set_mode(previous)
    old_node, old_nr = t._grad_fn, t._output_nr
    t._grad_fn = fresh._grad_fn
    t._requires_grad = fresh._requires_grad
    if fresh._output_nr:
        t._output_nr = fresh._output_nr
    else:
        t.__dict__.pop("_output_nr", None)
    t.__dict__.pop("_hooks", None)  # hooks stay with the old node, as in PyTorch
    t._view_version = vc.value
    t._move_retained_grad(old_node, old_nr)  # a retained grad does not


_MODES = {"inference": ("inference mode", "in normal mode", "inference_mode"),
          "no_grad": ("no_grad mode", "with grad mode enabled", "no_grad")}


def made_in_mode_error(made_in: str, base_changed: bool) -> RuntimeError:
    """PyTorch's error for a view made in inference or no_grad mode of a tensor that requires
    grad, changed in place (or whose base was) with grad mode on."""
    mode, now, block = _MODES[made_in]
    what = ("its base or another view of its base has been modified inplace" if base_changed
            else "is being modified inplace")
    return RuntimeError(
        f"A view was created in {mode} and {what} {now}. Given that this use case is ambiguous "
        f"and error-prone, it is forbidden. You can clarify your code by moving both the view "
        f"and the inplace either both inside the {block} block (if you don't want the inplace "
        "to be tracked) or both outside (if you want the inplace to be tracked).")


def check_inplace_on_view(t: Tensor) -> None:
    """PyTorch refuses in-place changes to the outputs of ops that return several views."""
    op = _multi_output_op(t)
    if op is not None:
        raise RuntimeError(
            f"Output {t._view_chain[-1][2]} of {op} is a view and is being modified inplace. "
            "This view is the output of a function that returns multiple views. Such functions "
            "do not allow the output views to be modified inplace. You should replace the "
            "inplace operation by an out-of-place one.")


def _multi_output_op(t: Tensor) -> str | None:
    """The name (PyTorch's, without ``Backward0``) of the multi-output view op that made
    ``t``, when ``t`` requires grad, else None."""
    if not t._requires_grad or not t._view_chain:
        return None
    cls = t._view_chain[-1][0]
    if not getattr(cls, "multi_output_view", False):
        return None
    return cls._node_cls.__name__.removesuffix("Backward0")
