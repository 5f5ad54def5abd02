"""In-place view operations (``transpose_``, ``t_``, ``squeeze_``, ``unsqueeze_``,
``swapdims_``, ``as_strided_``) and ``as_strided``.

An in-place view op changes only how a tensor looks at its memory. As in PyTorch, it is the
out-of-place view op (recorded by ``Function.apply`` under PyTorch's ``...Backward1`` node
names) whose result the tensor then becomes: its grad_fn moves on to the view's node (hooks
registered before, and a retained grad, stay with the old node), its version goes up by one,
and a view stays a view of the same base (a tensor that was not a view does not become one).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..function import Op
from ..grad_mode import state as _mode
from ..node import rebase
from ..tensor import Tensor
from ..views import check_inplace_on_view
from . import shape

__all__ = ["as_strided"]


# -- as_strided -------------------------------------------------------------------------------

def _storage(a: np.ndarray) -> tuple[np.ndarray, int]:
    """The array owning ``a``'s memory and ``a``'s offset in it, in elements."""
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    offset = (a.__array_interface__["data"][0] - root.__array_interface__["data"][0])
    return root, offset // a.itemsize


def _positions(size: tuple, stride: tuple, offset: int) -> np.ndarray:
    """The storage position of every element of a ``size``/``stride`` layout."""
    pos = np.full(size, offset, dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape_d = [1] * len(size)
        shape_d[d] = n
        pos = pos + (np.arange(n, dtype=np.int64) * s).reshape(shape_d)
    return pos


class StridedMove(Op):
    """Gradient of ``as_strided``: values added at the storage positions ``src``, read back
    at ``dst`` (a linear map; its adjoint swaps the two)."""

    node_name = "AsStridedBackwardBackward0"

    @staticmethod
    def forward(ctx, g, src, dst, length):
        ctx.args = (dst, src, length)
        storage = np.zeros(length, dtype=g.dtype)
        np.add.at(storage, src.ravel(), g.ravel())
        return storage[dst]

    @staticmethod
    def backward(ctx, g):
        return StridedMove.apply(g, *ctx.args), None, None, None


class AsStrided(Op):
    node_name = "AsStridedBackward0"
    is_view = True

    @staticmethod
    def forward(ctx, a, size, stride, storage_offset):
        root, own_offset = _storage(a)
        offset = own_offset if storage_offset is None else storage_offset
        item = a.itemsize
        out_pos = _positions(size, stride, offset)
        in_pos = _positions(a.shape, tuple(s // item for s in a.strides), own_offset)
        ctx.args = (out_pos, in_pos, max(int(out_pos.max(initial=0)),
                                         int(in_pos.max(initial=0))) + 1)
        flat = root.reshape(-1, order="F" if root.flags.f_contiguous and root.ndim > 1 else "C")
        start = flat[offset:] if offset < flat.size else flat[:0]
        return np.lib.stride_tricks.as_strided(start, size, tuple(s * item for s in stride))

    @staticmethod
    def backward(ctx, g):
        return StridedMove.apply(g, *ctx.args), None, None, None


def as_strided(input: Tensor, size: Any, stride: Any, storage_offset: int | None = None
               ) -> Tensor:
    """A view of ``input``'s memory with the given size and strides (in elements), starting
    at ``storage_offset`` (default: where ``input`` starts)."""
    return _strided(AsStrided, input, size, stride, storage_offset)


def _strided(cls: type, input: Tensor, size: Any, stride: Any, storage_offset: Any) -> Tensor:
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape: sizes {list(size)}, "
                           f"strides {list(stride)}")
    if any(s < 0 for s in stride):
        raise RuntimeError("as_strided: Negative strides are not supported at the moment, got "
                           f"strides: {list(stride)}")
    root, own_offset = _storage(input._data)
    if not (root.flags.c_contiguous or root.flags.f_contiguous):
        raise RuntimeError("as_strided: the tensor's memory is not one contiguous block "
                           f"(shape {list(root.shape)}, byte strides {list(root.strides)})")
    offset = own_offset if storage_offset is None else int(storage_offset)
    if 0 not in size:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        item = input._data.itemsize
        if last >= root.size:
            raise RuntimeError(
                f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset "
                f"{offset}, and itemsize {item} requiring a storage size of {(last + 1) * item} "
                f"are out of bounds for storage of size {root.size * item}")
    return cls.apply(input, size, stride, storage_offset)


# -- the in-place forms -----------------------------------------------------------------------
# PyTorch names the nodes of the in-place forms ``...Backward1`` (squeeze_: 3, 4, 5).

def _renamed(base: type, node_name: str) -> type:
    return type(node_name.replace("Backward", ""), (base,),
                {"node_name": node_name, "__module__": __name__})


Transpose1 = _renamed(shape.Transpose, "TransposeBackward1")
T1 = _renamed(shape.Transpose, "TBackward1")
TVector1 = _renamed(shape.Reshape, "TBackward1")
Unsqueeze1 = _renamed(shape.Reshape, "UnsqueezeBackward1")
Squeeze3 = _renamed(shape.Reshape, "SqueezeBackward3")
Squeeze4 = _renamed(shape.Reshape, "SqueezeBackward4")
Squeeze5 = _renamed(shape.Reshape, "SqueezeBackward5")
AsStrided1 = _renamed(AsStrided, "AsStridedBackward1")


def _become(self: Tensor, new: Tensor) -> Tensor:
    """Make ``self`` the view ``new`` (computed from ``self``), as an in-place op."""
    self._data = new._data
    vc = new._vc if new._vc is not None else self._vc
    if vc is not None:
        self._vc = vc
        vc.value += 1
    if new._grad_fn is not None:
        hooks = self.__dict__.get("_hooks")
        rebase(self, new._grad_fn, new._output_nr, move_retain=False)
        if hooks is not None:  # PyTorch keeps the tensor's hook dict, bound to the old node:
            self._hooks = hooks  # hooks registered later join it there
    if self._base is not None and new._base is self._base:
        self._view_chain = new._view_chain
        self._view_version = vc.value
    elif self._base is None and not self._inference:
        self._layout += 1  # the views taken of it before are regenerated from its storage
    return self


def from_storage(base: Tensor, view: np.ndarray) -> Tensor:
    """The view of ``base``'s storage that ``view`` is, as ``as_strided`` (how a view is
    regenerated after its base changed shape in place, as in PyTorch)."""
    _root, offset = _storage(view)
    item = view.itemsize
    return AsStrided.apply(base, view.shape, tuple(s // item for s in view.strides), offset)


def _view_inplace(make: Any) -> Any:
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        self._check_inplace()
        if self._base is not None and _mode.grad_enabled:
            check_inplace_on_view(self)  # an output of unbind, split, ...
        return _become(self, make(self, *args, **kwargs))
    return method


def _transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    return shape.transpose_with(Transpose1, TVector1, input, dim0, dim1)


def _t(input: Tensor) -> Tensor:
    return shape.t_with(T1, TVector1, "t_()", input)


def _unsqueeze(input: Tensor, dim: int) -> Tensor:
    new = shape.unsqueeze_shape(input._data.shape, dim)
    return Unsqueeze1.apply(input, new)


def _squeeze(input: Tensor, dim: Any = None) -> Tensor:
    op, new = shape.squeeze_shape(input._data.shape, dim)
    cls = {shape.Squeeze: Squeeze3, shape.SqueezeDim: Squeeze4, shape.SqueezeDims: Squeeze5}[op]
    return cls.apply(input, new)


def _as_strided(input: Tensor, size: Any, stride: Any, storage_offset: int | None = None
                ) -> Tensor:
    return _strided(AsStrided1, input, size, stride, storage_offset)


TENSOR_METHODS = {
    "as_strided": as_strided,
    "transpose_": _view_inplace(_transpose), "swapdims_": _view_inplace(_transpose),
    "swapaxes_": _view_inplace(_transpose), "t_": _view_inplace(_t),
    "unsqueeze_": _view_inplace(_unsqueeze), "squeeze_": _view_inplace(_squeeze),
    "as_strided_": _view_inplace(_as_strided),
}
