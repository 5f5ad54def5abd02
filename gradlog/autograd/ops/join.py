"""Joining and splitting: cat, stack, split, chunk, unbind, narrow, select."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..function import Op
from ..tensor import Tensor, _wrap_dim, wrap
from ._util import promote_dtypes

__all__ = ["cat", "concat", "concatenate", "stack", "split", "chunk", "unbind", "narrow",
           "select", "hstack", "vstack"]


class Narrow(Op):
    """A slice ``start:start+length`` along one dimension (a view)."""

    node_name = "SliceBackward0"
    is_view = True

    @staticmethod
    def forward(ctx, a, d, start, length):
        ctx.in_shape, ctx.d, ctx.start = a.shape, d, start
        index = (slice(None),) * d + (slice(start, start + length),)
        return a[index]

    @staticmethod
    def backward(ctx, g):
        return _PadAlong.apply(g, ctx.d, ctx.start, ctx.in_shape), None, None, None


class _PadAlong(Op):
    """Zeros of ``shape`` with ``g`` placed at ``start`` along ``d`` (Narrow's adjoint)."""

    node_name = "SliceBackwardBackward0"

    @staticmethod
    def forward(ctx, g, d, start, shape):
        ctx.d, ctx.start, ctx.length = d, start, g.shape[d]
        out = np.zeros(shape, dtype=g.dtype)
        out[(slice(None),) * d + (slice(start, start + g.shape[d]),)] = g
        return out

    @staticmethod
    def backward(ctx, gg):
        return Narrow.apply(gg, ctx.d, ctx.start, ctx.length), None, None, None


def narrow(input: Tensor, dim: int, start: int, length: int) -> Tensor:
    d = _wrap_dim(dim, input._data.ndim)
    size = input._data.shape[d]
    if start < 0:
        start += size
    if not (0 <= start <= size and 0 <= length and start + length <= size):
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({size}).")
    return Narrow.apply(input, d, start, length)


class Select(Op):
    node_name = "SelectBackward0"
    is_view = True

    @staticmethod
    def forward(ctx, a, d, i):
        ctx.in_shape, ctx.d, ctx.i = a.shape, d, i
        return a[(slice(None),) * d + (i, Ellipsis)]  # Ellipsis: a 0-d result is still a view

    @staticmethod
    def backward(ctx, g):
        return (_PadAlong.apply(g.unsqueeze(ctx.d), ctx.d, ctx.i, ctx.in_shape),
                None, None)


def select(input: Tensor, dim: int, index: int) -> Tensor:
    d = _wrap_dim(dim, input._data.ndim)
    size = input._data.shape[d]
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size "
                         f"{list(input._data.shape)} at dimension {d}")
    return Select.apply(input, d, index % size)


class Cat(Op):
    node_name = "CatBackward0"

    @staticmethod
    def forward(ctx, *args):
        *arrays, d = args
        ctx.d = d
        ctx.sizes = [a.shape[d] for a in arrays]
        return np.concatenate(arrays, axis=d)

    @staticmethod
    def backward(ctx, g):
        grads = []
        start = 0
        for n, size in zip(ctx.needs_input_grad, ctx.sizes):
            grads.append(Narrow.apply(g, ctx.d, start, size) if n else None)
            start += size
        return (*grads, None)


def _promote_all(tensors: list) -> list:
    dts = {t._data.dtype for t in tensors}
    if len(dts) == 1:
        return tensors
    dt = functools.reduce(promote_dtypes, dts)
    return [t if t._data.dtype == dt else t.to(dt) for t in tensors]


def cat(tensors: Any, dim: int = 0, *, out: Any = None) -> Tensor:
    """Concatenate along an existing dimension; all other sizes must match."""
    tensors = [t for t in tensors]
    if not tensors:
        raise ValueError("gradlog.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{type(t).__name__}")
    # 1-D empty tensors are skipped, as in PyTorch
    tensors = [t for t in tensors if not (t._data.ndim == 1 and t._data.size == 0)] or tensors[:1]
    ref = tensors[0]._data
    d = _wrap_dim(dim, ref.ndim)
    for i, t in enumerate(tensors):
        s = t._data.shape
        if len(s) != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} and "
                               f"{len(s)}")
        for k in range(ref.ndim):
            if k != d and s[k] != ref.shape[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. "
                                   f"Expected size {ref.shape[k]} but got size {s[k]} for "
                                   f"tensor number {i} in the list.")
    tensors = _promote_all(tensors)
    return Cat.apply(*tensors, d)


concat = concatenate = cat


def stack(tensors: Any, dim: int = 0, *, out: Any = None) -> Tensor:
    """Join along a new dimension; all shapes must be equal."""
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    shape = tensors[0]._data.shape
    for i, t in enumerate(tensors):
        if t._data.shape != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(shape)} at entry 0 and {list(t._data.shape)} at entry {i}")
    n = len(shape) + 1
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return Stack.apply(*_promote_all(tensors), dim % n)


class Stack(Op):
    node_name = "StackBackward0"

    @staticmethod
    def forward(ctx, *args):
        *arrays, d = args
        ctx.d = d
        return np.stack(arrays, axis=d)

    @staticmethod
    def backward(ctx, g):
        grads = [g.select(ctx.d, i) if n else None
                 for i, n in enumerate(ctx.needs_input_grad[:-1])]
        return (*grads, None)


def hstack(tensors: Any) -> Tensor:
    tensors = list(tensors)
    return cat(tensors, 0 if tensors[0]._data.ndim == 1 else 1)


def vstack(tensors: Any) -> Tensor:
    return cat([t if t._data.ndim > 1 else t.unsqueeze(0) for t in tensors], 0)


class Split(Op):
    """Consecutive slices along one dimension, all views of the input: one node with an
    output per slice (in-place changes of them are refused, as in PyTorch)."""

    node_name = "SplitBackward0"
    is_view = True
    multi_output_view = True

    @staticmethod
    def forward(ctx, a, d, sizes):
        ctx.d, ctx.sizes = d, sizes
        out, start = [], 0
        for n in sizes:
            out.append(a[(slice(None),) * d + (slice(start, start + n),)])
            start += n
        ctx.out_shapes = tuple(o.shape for o in out)
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        return cat(_materialized(ctx, grads), ctx.d), None, None


class SplitWithSizes(Split):
    node_name = "SplitWithSizesBackward0"


class Unbind(Op):
    """Every index along one dimension, as views: one node, one output per index."""

    node_name = "UnbindBackward0"
    is_view = True
    multi_output_view = True

    @staticmethod
    def forward(ctx, a, d):
        ctx.d = d
        out = tuple(a[(slice(None),) * d + (i, Ellipsis)] for i in range(a.shape[d]))
        ctx.out_shapes = tuple(o.shape for o in out)
        return out

    @staticmethod
    def backward(ctx, *grads):
        return stack(_materialized(ctx, grads), ctx.d), None


def _materialized(ctx: Any, grads: tuple) -> list:
    """The outputs' gradients, zeros for those that got none."""
    shapes = ctx.out_shapes
    like = next(g for g in grads if g is not None)
    return [g if g is not None else wrap(np.zeros(shape, dtype=like._data.dtype))
            for g, shape in zip(grads, shapes)]


def split(tensor: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple:
    """Split into chunks of ``split_size`` (the last may be smaller) or of the given sizes."""
    d = _wrap_dim(dim, tensor._data.ndim)
    size = tensor._data.shape[d]
    if isinstance(split_size_or_sections, (int, np.integer)):
        step = int(split_size_or_sections)
        if step <= 0 and size:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got "
                               f"dimension size of {size}")
        sizes = tuple(min(step, size - s) for s in range(0, size, step)) if size else (0,)
        return Split.apply(tensor, d, sizes)
    sizes = tuple(int(s) for s in split_size_or_sections)
    if sum(sizes) != size:
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} "
                           f"(input tensor's size at dimension {d}), but got "
                           f"split_sizes={list(sizes)}")
    return SplitWithSizes.apply(tensor, d, sizes)


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple:
    """Split into ``chunks`` pieces of ``ceil(size / chunks)`` (fewer if the size is small)."""
    if chunks <= 0:
        raise RuntimeError("chunk expects `chunks` to be greater than 0, got: " f"{chunks}")
    d = _wrap_dim(dim, input._data.ndim)
    size = input._data.shape[d]
    step = max(-(-size // chunks), 1)
    return split(input, step, d)


def unbind(input: Tensor, dim: int = 0) -> tuple:
    d = _wrap_dim(dim, input._data.ndim)
    return Unbind.apply(input, d)


TENSOR_METHODS = {
    "split": split, "chunk": chunk, "unbind": unbind, "narrow": narrow, "select": select,
}
