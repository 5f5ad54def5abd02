"""Indexing with gradient: basic (ints, slices, None, ...) gives views; integer arrays and
boolean masks give copies whose backward accumulates repeated indices. Index assignment
(``t[mask] = 0``) is an in-place op. Also gather, index_select, masked_select."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..function import Op
from ..grad_mode import state as _mode
from ..tensor import Tensor, _wrap_dim, wrap
from ._util import unbroadcast
from .inplace import apply_inplace

__all__ = ["getitem", "setitem", "gather", "index_select", "masked_select", "take"]


def convert_index(index: Any) -> tuple[Any, bool]:
    """The numpy index for ``index`` and whether it uses advanced (array) indexing."""
    items = index if isinstance(index, tuple) else (index,)
    out = []
    advanced = False
    for item in items:
        if isinstance(item, Tensor):
            arr = item._data
            if arr.dtype.kind == "f":
                raise IndexError("tensors used as indices must be long, int, byte or bool "
                                 "tensors")
            if arr.ndim == 0 and arr.dtype.kind in "iu":
                out.append(int(arr))
                continue
            advanced = True
            out.append(arr)
        elif isinstance(item, (list, np.ndarray)):
            arr = np.asarray(item)
            if arr.dtype.kind == "f":
                raise IndexError("tensors used as indices must be long, int, byte or bool "
                                 "tensors")
            advanced = True
            out.append(arr)
        elif isinstance(item, (bool, np.bool_)):
            advanced = True
            out.append(item)
        elif item is None or item is Ellipsis or isinstance(item, (int, np.integer, slice)):
            out.append(item)
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or "
                             f"byte Variables are valid indices (got {type(item).__name__})")
    return tuple(out), advanced


def _index(a: np.ndarray, idx: tuple) -> np.ndarray:
    try:
        return a[idx]
    except IndexError as exc:
        text = str(exc)
        if text.startswith("too many indices"):
            text = f"too many indices for tensor of dimension {a.ndim}"
        raise IndexError(text.replace("axis", "dimension")) from None


class BasicIndex(Op):
    node_name = "SliceBackward0"
    is_view = True

    @staticmethod
    def forward(ctx, a, idx):
        ctx.idx, ctx.shape = idx, a.shape
        if not any(i is Ellipsis for i in idx):
            idx = idx + (Ellipsis,)  # so that `x[0]` of a 1-D array is a 0-d view, not a copy
        return _index(a, idx)

    @staticmethod
    def backward(ctx, g):
        return IndexAdd.apply(g, ctx.idx, ctx.shape, False), None


class AdvancedIndex(Op):
    node_name = "IndexBackward0"

    @staticmethod
    def forward(ctx, a, idx):
        ctx.save_for_backward(idx)  # index arrays: released after backward
        ctx.shape = a.shape
        return _index(a, idx)

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        return IndexAdd.apply(g, idx, ctx.shape, True), None


class IndexAdd(Op):
    """Zeros of ``shape`` with ``g`` added at ``idx`` (repeated indices accumulate)."""

    node_name = "IndexBackwardBackward0"

    @staticmethod
    def forward(ctx, g, idx, shape, advanced):
        ctx.save_for_backward(idx)
        ctx.advanced = advanced
        out = np.zeros(shape, dtype=g.dtype)
        if advanced and any(isinstance(i, np.ndarray) and i.dtype.kind in "iu" for i in idx):
            np.add.at(out, idx, g)
        else:
            out[idx] = g
        return out

    @staticmethod
    def backward(ctx, gg):
        op = AdvancedIndex if ctx.advanced else BasicIndex
        (idx,) = ctx.saved_tensors
        return op.apply(gg, idx), None, None, None


class IndexSelect(AdvancedIndex):
    node_name = "IndexSelectBackward0"


class MaskedSelect(AdvancedIndex):
    node_name = "MaskedSelectBackward0"


class Take(AdvancedIndex):
    node_name = "TakeBackward0"


def getitem(self: Tensor, index: Any) -> Tensor:
    idx, advanced = convert_index(index)
    if not advanced and idx and len(idx) <= self._data.ndim and \
            all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in idx):
        from .join import Select  # integers only: one select per index, as PyTorch
        for d, i in enumerate(idx):
            size = self._data.shape[0]
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size "
                                 f"{size}")
            self = Select.apply(self, 0, int(i) % size)
        return self
    return (AdvancedIndex if advanced else BasicIndex).apply(self, idx)


class IndexPut(Op):
    """``self`` with ``values`` written at ``idx``: gradient 0 there for ``self``."""

    node_name = "IndexPutBackward0"

    @staticmethod
    def forward(ctx, a, values, idx):
        ctx.save_for_backward(idx)
        ctx.vshape = np.shape(values)
        out = a.copy()
        out[idx] = values
        return out

    @staticmethod
    def backward(ctx, g):
        na, nv, _ = ctx.needs_input_grad
        (idx,) = ctx.saved_tensors
        ga = gv = None
        if na:
            keep = np.ones(g._data.shape, dtype=g._data.dtype)
            keep[idx] = 0
            from .activation import MaskMul
            ga = MaskMul.apply(g, keep)
        if nv:
            picked = AdvancedIndex.apply(g, idx)
            gv = unbroadcast(picked, ctx.vshape)
        return ga, gv, None


def setitem(self: Tensor, index: Any, value: Any) -> None:
    """``self[index] = value`` as an in-place op (version bump; graph when needed)."""
    idx, advanced = convert_index(index)
    if not advanced and self._requires_grad and self._grad_fn is None and _mode.grad_enabled:
        # PyTorch writes a basic index through a view of the leaf, hence its message
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                           "in-place operation.")
    raw = value._data if isinstance(value, Tensor) else value

    def fast(a: np.ndarray) -> None:
        try:
            a[idx] = raw
        except IndexError as exc:
            raise IndexError(str(exc).replace("axis", "dimension")) from None

    def graph(t: Tensor) -> Tensor:
        v = value if isinstance(value, Tensor) else wrap(np.asarray(raw, dtype=t._data.dtype))
        if v._data.dtype != t._data.dtype:
            v = v.to(t.dtype)
        return IndexPut.apply(t, v, idx)

    others = (value,) if isinstance(value, Tensor) else ()
    if not _mode.grad_enabled or not (self._requires_grad or any(o._requires_grad
                                                                  for o in others)):
        if self._base is None or not self._base._requires_grad:
            self._check_inplace(others)
            fast(self._data)
            self._bump_version()
            return
    apply_inplace(self, fast, graph, others)


class Gather(Op):
    node_name = "GatherBackward0"

    @staticmethod
    def forward(ctx, a, d, index):
        ctx.save_for_backward(index)
        ctx.d, ctx.shape = d, a.shape
        return np.take_along_axis(a, index, d)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        return ScatterAdd.apply(g, ctx.d, index._data, ctx.shape), None, None


class ScatterAdd(Op):
    node_name = "ScatterAddBackward0"

    @staticmethod
    def forward(ctx, src, d, index, shape):
        ctx.save_for_backward(index)
        ctx.d = d
        out = np.zeros(shape, dtype=src.dtype)
        grids = list(np.indices(index.shape, sparse=True))
        grids[d] = index
        np.add.at(out, tuple(grids), src)
        return out

    @staticmethod
    def backward(ctx, gg):
        (index,) = ctx.saved_tensors
        return Gather.apply(gg, ctx.d, index._data), None, None, None


def gather(input: Tensor, dim: int, index: Tensor) -> Tensor:
    d = _wrap_dim(dim, input._data.ndim)
    idx = index._data if isinstance(index, Tensor) else np.asarray(index)
    if idx.ndim != input._data.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    if idx.size and (idx.min() < 0 or idx.max() >= input._data.shape[d]):
        bad = idx.max() if idx.max() >= input._data.shape[d] else idx.min()
        raise RuntimeError(f"index {bad} is out of bounds for dimension {d} with size "
                           f"{input._data.shape[d]}")
    return Gather.apply(input, d, idx)


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    d = _wrap_dim(dim, input._data.ndim)
    idx = index._data if isinstance(index, Tensor) else np.asarray(index)
    return IndexSelect.apply(input, (slice(None),) * d + (idx.reshape(-1),))


def masked_select(input: Tensor, mask: Any) -> Tensor:
    m = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
    shape = np.broadcast_shapes(input._data.shape, m.shape)
    if input._data.shape != shape:
        input = input.expand(shape)
    return MaskedSelect.apply(input, (np.broadcast_to(m, shape),))


def take(input: Tensor, index: Tensor) -> Tensor:
    idx, _ = convert_index(index)
    return Take.apply(input.reshape(-1), idx)


TENSOR_METHODS = {
    "__getitem__": getitem, "__setitem__": setitem, "gather": gather,
    "index_select": index_select, "masked_select": masked_select, "take": take,
}
