"""Shape operations: reshape/view, flatten, permute, transpose, squeeze, unsqueeze, expand.

Where numpy can, the result is a view sharing memory (and the version counter) with the input,
as in PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..function import Op
from ..tensor import Size, Tensor, _wrap_dim
from ._util import normalize_dims

__all__ = ["reshape", "view", "flatten", "unflatten", "permute", "transpose", "t", "unsqueeze",
           "squeeze", "expand", "expand_as", "contiguous", "movedim", "swapaxes", "view_as",
           "reshape_as", "broadcast_to", "flip", "repeat", "tile"]


def _parse_shape(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, Size)):
        shape = tuple(shape[0])
    return tuple(int(s) for s in shape)


def _infer_shape(shape: tuple, numel: int) -> tuple:
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = 1
    for s in shape:
        if s != -1:
            if s < 0:
                raise RuntimeError(f"invalid shape dimension {s}")
            known *= s
    if neg:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


class Reshape(Op):
    node_name = "ViewBackward0"
    is_view = True

    @staticmethod
    def forward(ctx, a, shape):
        ctx.in_shape = a.shape
        return a.reshape(shape)

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.in_shape), None


class ReshapeAlias(Reshape):
    node_name = "ReshapeAliasBackward0"


class Unsqueeze(Reshape):
    node_name = "UnsqueezeBackward0"


class Squeeze(Reshape):
    node_name = "SqueezeBackward0"  # squeeze()


class SqueezeDim(Reshape):
    node_name = "SqueezeBackward1"  # squeeze(dim)


class SqueezeDims(Reshape):
    node_name = "SqueezeBackward2"  # squeeze(dims)


class TVector(Reshape):
    node_name = "TBackward0"  # t() of a 0-D or 1-D tensor: the same view


def reshape(input: Tensor, *shape: Any) -> Tensor:
    """Same data in a new shape (a view when the layout allows, else a copy)."""
    shape = _infer_shape(_parse_shape(shape), input._data.size)
    return Reshape.apply(input, shape)


def view(input: Tensor, *shape: Any) -> Tensor:
    """A view in a new shape; refuses layouts that would need a copy (as PyTorch does)."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer, tuple, list, Size)):
        from .conversion import to
        return to(input, shape[0])
    shape = _infer_shape(_parse_shape(shape), input._data.size)
    try:
        np.ndarray.reshape(input._data.view(), shape, copy=False)
    except ValueError:
        raise RuntimeError(
            "view size is not compatible with input tensor's size and stride (at least one "
            "dimension spans across two contiguous subspaces). Use .reshape(...) instead.") \
            from None
    return Reshape.apply(input, shape)


def view_as(input: Tensor, other: Tensor) -> Tensor:
    return view(input, other._data.shape)


def reshape_as(input: Tensor, other: Tensor) -> Tensor:
    return reshape(input, other._data.shape)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    shape = input._data.shape
    if not shape:
        return reshape(input, (1,))
    s = _wrap_dim(start_dim, len(shape))
    e = _wrap_dim(end_dim, len(shape))
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    n = 1
    for d in shape[s:e + 1]:
        n *= d
    return reshape(input, shape[:s] + (n,) + shape[e + 1:])


def unflatten(input: Tensor, dim: int, sizes: Any) -> Tensor:
    shape = input._data.shape
    d = _wrap_dim(dim, len(shape))
    sizes = _infer_shape(tuple(sizes), shape[d])
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


class Permute(Op):
    node_name = "PermuteBackward0"
    is_view = True

    @staticmethod
    def forward(ctx, a, dims):
        ctx.dims = dims
        return a.transpose(dims)

    @staticmethod
    def backward(ctx, g):
        return g.permute(tuple(np.argsort(ctx.dims))), None


def permute(input: Tensor, *dims: Any) -> Tensor:
    dims = _parse_shape(dims)
    n = input._data.ndim
    if len(dims) != n:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does "
                           f"not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {n} is not equal to len(dims) = {len(dims)}")
    dims = tuple(_wrap_dim(d, n) for d in dims)
    if len(set(dims)) != n:
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return Permute.apply(input, dims)


class Transpose(Op):
    node_name = "TransposeBackward0"
    is_view = True

    @staticmethod
    def forward(ctx, a, d0, d1):
        ctx.dims = (d0, d1)
        return a.swapaxes(d0, d1)

    @staticmethod
    def backward(ctx, g):
        return g.transpose(*ctx.dims), None, None


def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    return transpose_with(Transpose, Reshape, input, dim0, dim1)


def transpose_with(op: type, same: type, input: Tensor, dim0: int, dim1: int) -> Tensor:
    """``transpose`` recorded as ``op`` (``same`` when it changes nothing)."""
    n = input._data.ndim
    d0, d1 = _wrap_dim(dim0, n), _wrap_dim(dim1, n)
    if n < 2 and d0 == d1:
        return same.apply(input, input._data.shape)
    return op.apply(input, d0, d1)


swapaxes = transpose


class T(Transpose):
    node_name = "TBackward0"


def t(input: Tensor) -> Tensor:
    """Transpose of a matrix (1-D and 0-D tensors are returned as they are)."""
    return t_with(T, TVector, "t()", input)


def t_with(op: type, vector: type, name: str, input: Tensor) -> Tensor:
    """``t`` recorded as ``op`` (``vector`` for 0-D and 1-D tensors)."""
    n = input._data.ndim
    if n > 2:
        raise RuntimeError(f"{name} expects a tensor with <= 2 dimensions, but self is {n}D")
    if n < 2:
        return vector.apply(input, input._data.shape)
    return op.apply(input, 0, 1)


def movedim(input: Tensor, source: Any, destination: Any) -> Tensor:
    """Move the dimensions ``source`` to the positions ``destination``; the others keep their
    order."""
    n = input._data.ndim
    src = (source,) if isinstance(source, (int, np.integer)) else tuple(source)
    dst = (destination,) if isinstance(destination, (int, np.integer)) else tuple(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} "
                           f"dims) should contain the same number of dims as destination "
                           f"({list(dst)} dims)")
    src = tuple(_wrap_dim(d, n) for d in src)
    dst = tuple(_wrap_dim(d, n) for d in dst)
    if len(set(src)) != len(src):
        raise RuntimeError("movedim: repeated dim in `source` " f"({list(src)})")
    if len(set(dst)) != len(dst):
        raise RuntimeError("movedim: repeated dim in `destination` " f"({list(dst)})")
    order: list = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(n) if i not in src)
    return permute(input, tuple(o if o is not None else next(rest) for o in order))


def unsqueeze_shape(shape: tuple, dim: int) -> tuple:
    """``shape`` with a 1 inserted at ``dim``."""
    n = len(shape) + 1
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    d = dim % n
    return shape[:d] + (1,) + shape[d:]


def unsqueeze(input: Tensor, dim: int) -> Tensor:
    return Unsqueeze.apply(input, unsqueeze_shape(input._data.shape, dim))


def squeeze_shape(shape: tuple, dim: Any) -> tuple:
    """Which squeeze (all, one dim, several dims) and the shape it leaves."""
    if dim is None:
        return Squeeze, tuple(s for s in shape if s != 1)
    op = SqueezeDim if isinstance(dim, (int, np.integer)) else SqueezeDims
    dims = set(normalize_dims(dim, len(shape)))
    return op, tuple(s for i, s in enumerate(shape) if not (i in dims and s == 1))


def squeeze(input: Tensor, dim: Any = None) -> Tensor:
    op, new = squeeze_shape(input._data.shape, dim)
    return op.apply(input, new)


class Expand(Op):
    node_name = "ExpandBackward0"
    is_view = True

    @staticmethod
    def forward(ctx, a, shape):
        ctx.in_shape = a.shape
        return np.broadcast_to(a, shape)

    @staticmethod
    def backward(ctx, g):
        from ._util import unbroadcast
        return unbroadcast(g, ctx.in_shape), None


def expand(input: Tensor, *sizes: Any) -> Tensor:
    """A broadcast view (read-only: write to a ``clone()`` of it)."""
    sizes = _parse_shape(sizes)
    shape = input._data.shape
    lead = len(sizes) - len(shape)
    if lead < 0:
        raise RuntimeError(f"expand(gradlog.FloatTensor{{{list(shape)}}}, size={list(sizes)}): "
                           "the number of sizes provided ({len(sizes)}) must be greater or equal "
                           f"to the number of dimensions in the tensor ({len(shape)})")
    target = []
    for i, s in enumerate(sizes):
        if i < lead:
            if s < 0:
                raise RuntimeError(f"The expanded size of the tensor ({s}) isn't allowed in a "
                                   "leading, non-existing dimension")
            target.append(s)
            continue
        cur = shape[i - lead]
        if s == -1:
            target.append(cur)
        elif cur == 1 or cur == s:
            target.append(s)
        else:
            raise RuntimeError(f"The expanded size of the tensor ({s}) must match the existing "
                               f"size ({cur}) at non-singleton dimension {i}.  Target sizes: "
                               f"{list(sizes)}.  Tensor sizes: {list(shape)}")
    return Expand.apply(input, tuple(target))


def expand_as(input: Tensor, other: Tensor) -> Tensor:
    return expand(input, other._data.shape)


def broadcast_to(input: Tensor, shape: Any) -> Tensor:
    return expand(input, tuple(shape))


class Contiguous(Op):
    node_name = "CloneBackward0"

    @staticmethod
    def forward(ctx, a):
        return np.ascontiguousarray(a)

    @staticmethod
    def backward(ctx, g):
        return g


def contiguous(input: Tensor, memory_format: Any = None) -> Tensor:
    if input._data.flags.c_contiguous:
        return input
    return Contiguous.apply(input)


class Flip(Op):
    node_name = "FlipBackward0"

    @staticmethod
    def forward(ctx, a, dims):
        ctx.dims = dims
        return np.flip(a, dims).copy()

    @staticmethod
    def backward(ctx, g):
        return g.flip(ctx.dims), None


def flip(input: Tensor, dims: Any) -> Tensor:
    return Flip.apply(input, normalize_dims(dims, input._data.ndim))


class Tile(Op):
    node_name = "RepeatBackward0"

    @staticmethod
    def forward(ctx, a, reps):
        ctx.in_shape = a.shape
        ctx.reps = reps
        return np.tile(a, reps)

    @staticmethod
    def backward(ctx, g):
        shape, reps = ctx.in_shape, ctx.reps
        lead = len(reps) - len(shape)
        full = (1,) * lead + tuple(shape)
        inter = []
        for r, s in zip(reps, full):
            inter += [r, s]
        g = g.reshape(tuple(inter)).sum(tuple(range(0, 2 * len(full), 2)))
        return g.reshape(shape), None


def repeat(input: Tensor, *sizes: Any) -> Tensor:
    """Tile the tensor ``sizes`` times along each dimension (PyTorch's ``Tensor.repeat``)."""
    reps = _parse_shape(sizes)
    if len(reps) < input._data.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    return Tile.apply(input, reps)


def tile(input: Tensor, dims: Any) -> Tensor:
    dims = _parse_shape((dims,))
    dims = (1,) * (input._data.ndim - len(dims)) + dims
    return repeat(input, dims)


TENSOR_METHODS = {
    "reshape": reshape, "view": view, "view_as": view_as, "reshape_as": reshape_as,
    "flatten": flatten, "unflatten": unflatten, "permute": permute, "transpose": transpose,
    "swapaxes": swapaxes, "t": t, "movedim": movedim, "unsqueeze": unsqueeze,
    "squeeze": squeeze, "expand": expand, "expand_as": expand_as, "contiguous": contiguous,
    "flip": flip, "repeat": repeat, "tile": tile,
    "T": property(lambda self: permute(self, tuple(range(self._data.ndim - 1, -1, -1)))),
    "mT": property(lambda self: transpose(self, -2, -1)),
}
