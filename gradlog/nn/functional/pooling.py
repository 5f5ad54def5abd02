"""2-d pooling: ``max_pool2d``, ``avg_pool2d``, ``adaptive_avg_pool2d``.

Each op loops over kernel positions only, reading one strided view of the padded input per
position, so overlapping windows, padding, dilation and ceil mode need no special case and
no ``np.add.at``. Max pooling's gradient goes to the first maximum of each window in
row-major order (PyTorch's rule, which matters after a ReLU, where ties at 0 are common).
Each op's gradient is an op whose gradient is the original again, so double backward works.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.function import Op
from ...autograd.tensor import Tensor, array_of, wrap
from ._utils import pair, shape_str
from ._windows import Geometry, kernel_views, padded, unpadded

__all__ = ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"]


def _out_size(size: int, k: int, pad: int, stride: int, dil: int, ceil_mode: bool) -> int:
    span = size + 2 * pad - dil * (k - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1  # the last window would start in the right padding only
    return out


def pool_geometry(shape: tuple, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                  ceil_mode: bool) -> Geometry:
    """Check a pooling call's arguments (PyTorch's messages) and compute its output size."""
    kernel = pair(kernel_size, "kernel_size")
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else pair(stride, "stride")
    pad, dil = pair(padding, "padding"), pair(dilation, "dilation")
    if min(kernel) <= 0:
        raise RuntimeError(f"kernel_size must be greater than zero, but got kH: {kernel[0]} "
                           f"kW: {kernel[1]}")
    if min(stride) <= 0:
        raise RuntimeError("stride should not be zero")
    if min(dil) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilationH: {dil[0]} "
                           f"dilationW: {dil[1]}")
    for p, k, d in zip(pad, kernel, dil):
        if p < 0 or p > (d * (k - 1) + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got "
                               f"pad={p}, kernel_size={k} and dilation={d}")
    h, w = shape[-2:]
    out = tuple(_out_size(s, k, p, st, d, ceil_mode)
                for s, k, p, st, d in zip((h, w), kernel, pad, stride, dil))
    if min(out) < 1:
        c = shape[-3]
        raise RuntimeError(f"Given input size: ({c}x{h}x{w}). Calculated output size: "
                           f"({c}x{out[0]}x{out[1]}). Output size is too small")
    # ceil-mode windows may hang over the right/bottom padding: pad those rows too
    far = [(o - 1) * st + d * (k - 1) + 1 - s - p
           for o, st, d, k, s, p in zip(out, stride, dil, kernel, (h, w), pad)]
    full_pad = (pad[0], max(pad[0], far[0]), pad[1], max(pad[1], far[1]))
    return Geometry((h, w), out, kernel, stride, dil, full_pad)


def _tiles(geom: Geometry) -> bool:
    """Whether the windows cover the input exactly once (kernel == stride, no padding)."""
    (kh, kw), (ho, wo) = geom.kernel, geom.out_hw
    return (geom.stride == geom.kernel and geom.dilation == (1, 1) and not any(geom.pad)
            and geom.in_hw == (ho * kh, wo * kw))


def _check_rank(input: Tensor, name: str) -> None:
    if array_of(input).ndim not in (3, 4) or array_of(input).size == 0:
        raise RuntimeError(f"{name}: non-empty 3D or 4D (batch mode) tensor expected for input, "
                           f"got input of size {shape_str(array_of(input).shape)}")


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _scatter(parts: Any, shape: tuple, geom: Geometry, dtype: np.dtype) -> np.ndarray:
    """Sum the (..., Ho, Wo) arrays ``parts`` (one per kernel position) into an input-shaped
    array; windows that tile the input are written directly, without zero-filling first."""
    if _tiles(geom):
        dx = np.empty(shape, dtype=dtype)
        for (_, _, view), fill in zip(kernel_views(dx, geom), parts):
            fill(view)
        return dx
    h, w = geom.padded_hw
    dxp = np.zeros(shape[:-2] + (h, w), dtype=dtype)
    for (_, _, view), fill in zip(kernel_views(dxp, geom), parts):
        view += fill(None)
    return unpadded(dxp, geom)


# -- max pooling --------------------------------------------------------------------------


def first_max_masks(x: np.ndarray, out: np.ndarray, geom: Geometry) -> list:
    """Per kernel position, where that position holds the first maximum of its window."""
    xp = padded(x, geom, _lowest(x.dtype))
    nan = out.dtype.kind == "f" and bool(np.isnan(out).any())
    n = geom.kernel[0] * geom.kernel[1]
    masks, taken = [], None
    for k, (_, _, view) in enumerate(kernel_views(xp, geom)):
        sel = np.equal(view, out)
        if nan:
            sel |= np.isnan(view)
        if taken is None:
            taken = sel.copy() if n > 1 else sel
        else:
            np.greater(sel, taken, out=sel)  # sel and not taken
            if k < n - 1:
                taken |= sel
        masks.append(sel)
    return masks


class MaxPool2d(Op):
    node_name = "MaxPool2DWithIndicesBackward0"

    @staticmethod
    def forward(ctx, x, geom):
        views = [v for _, _, v in kernel_views(padded(x, geom, _lowest(x.dtype)), geom)]
        out = np.maximum(views[0], views[1]) if len(views) > 1 else views[0].copy()
        for v in views[2:]:
            np.maximum(out, v, out=out)
        ctx.geom = geom
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        masks = first_max_masks(array_of(x), array_of(out), ctx.geom)
        return MaxPoolScatter.apply(g, masks, ctx.geom, array_of(x).shape), None


class MaxPoolScatter(Op):
    """Each window's gradient placed at its first maximum (the masks)."""

    node_name = "MaxPool2DWithIndicesBackwardBackward0"

    @staticmethod
    def forward(ctx, g, masks, geom, shape):
        def part(m: np.ndarray) -> Any:
            return lambda view: np.multiply(g, m, out=view) if view is not None else g * m
        ctx.save_for_backward(masks)
        ctx.geom = geom
        return _scatter([part(m) for m in masks], shape, geom, g.dtype)

    @staticmethod
    def backward(ctx, h):
        (masks,) = ctx.saved_tensors
        return MaxPoolGather.apply(h, masks, ctx.geom), None, None, None


class MaxPoolGather(Op):
    """The adjoint of :class:`MaxPoolScatter`: each window reads its first maximum's value."""

    node_name = "MaxPool2DWithIndicesBackwardBackward0"

    @staticmethod
    def forward(ctx, h, masks, geom):
        hp = padded(h, geom)
        out = np.zeros(h.shape[:-2] + geom.out_hw, dtype=h.dtype)
        for (_, _, view), m in zip(kernel_views(hp, geom), masks):
            out += view * m
        ctx.save_for_backward(masks)
        ctx.geom, ctx.shape = geom, h.shape
        return out

    @staticmethod
    def backward(ctx, gg):
        (masks,) = ctx.saved_tensors
        return MaxPoolScatter.apply(gg, masks, ctx.geom, ctx.shape), None, None


def _flat_indices(masks: list, geom: Geometry) -> np.ndarray:
    """PyTorch's return_indices: the flat (h * W + w) input position of each window's max."""
    (ho, wo), (sh, sw), (dh, dw), (_, kw) = geom.out_hw, geom.stride, geom.dilation, \
        geom.kernel
    w = geom.in_hw[1]
    base = ((np.arange(ho) * sh - geom.pad[0])[:, None] * w
            + (np.arange(wo) * sw - geom.pad[2])[None, :])
    idx = np.zeros(masks[0].shape, dtype=np.int64)
    for k, m in enumerate(masks):
        i, j = divmod(k, kw)
        idx += m * (i * dh * w + j * dw)
    return idx + base


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """Max over each (dilated) window; with ``return_indices`` also the flat input index of
    each maximum, as ``(output, indices)``."""
    _check_rank(input, "max_pool2d")
    geom = pool_geometry(array_of(input).shape, kernel_size, stride, padding, dilation, ceil_mode)
    out = MaxPool2d.apply(input, geom)
    if not return_indices:
        return out
    masks = first_max_masks(array_of(input), array_of(out), geom)
    return out, wrap(_flat_indices(masks, geom))


# -- average pooling ----------------------------------------------------------------------


def _divisor(geom: Geometry, pad: tuple, count_include_pad: bool,
             divisor_override: Any) -> Any:
    """PyTorch's divisor per output pixel: the window clipped to the padded input (or to the
    input itself without ``count_include_pad``); a number when it is the same everywhere."""
    if divisor_override:
        return float(divisor_override)
    sizes = []
    for n, o, k, s, p in zip(geom.in_hw, geom.out_hw, geom.kernel, geom.stride, pad):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, n)
        sizes.append(end - start)
    div = np.outer(sizes[0], sizes[1])
    return float(div.flat[0]) if (div == div.flat[0]).all() else div


class AvgPool2d(Op):
    node_name = "AvgPool2DBackward0"

    @staticmethod
    def forward(ctx, x, geom, divisor):
        views = [v for _, _, v in kernel_views(padded(x, geom), geom)]
        out = views[0] + views[1] if len(views) > 1 else views[0].copy()
        for v in views[2:]:
            out += v
        out /= divisor if isinstance(divisor, float) else divisor.astype(x.dtype)
        ctx.geom, ctx.divisor, ctx.shape = geom, divisor, x.shape
        return out

    @staticmethod
    def backward(ctx, g):
        return AvgPoolScatter.apply(g, ctx.geom, ctx.divisor, ctx.shape), None, None


class AvgPoolScatter(Op):
    """Each window's gradient spread evenly over the window (the adjoint of AvgPool2d)."""

    node_name = "AvgPool2DBackwardBackward0"

    @staticmethod
    def forward(ctx, g, geom, divisor, shape):
        share = g / (divisor if isinstance(divisor, float) else divisor.astype(g.dtype))
        n = geom.kernel[0] * geom.kernel[1]

        def part(view: Any) -> Any:
            return np.copyto(view, share) if view is not None else share
        ctx.geom, ctx.divisor = geom, divisor
        return _scatter([part] * n, shape, geom, g.dtype)

    @staticmethod
    def backward(ctx, h):
        return AvgPool2d.apply(h, ctx.geom, ctx.divisor), None, None, None


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """Mean over each window; ``count_include_pad`` counts zero padding in the divisor."""
    _check_rank(input, "avg_pool2d")
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    geom = pool_geometry(array_of(input).shape, kernel_size, stride, padding, 1, ceil_mode)
    divisor = _divisor(geom, pair(padding, "padding"), count_include_pad, divisor_override)
    return AvgPool2d.apply(input, geom, divisor)


def _adaptive_matrix(n: int, o: int, dtype: np.dtype) -> np.ndarray:
    """(o, n) averaging matrix over PyTorch's adaptive windows [floor(i*n/o), ceil((i+1)*n/o))."""
    i = np.arange(o)
    start, end = (i * n) // o, -((-(i + 1) * n) // o)
    cols = np.arange(n)
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return (inside / (end - start)[:, None]).astype(dtype)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """Average over windows chosen so the output has ``output_size`` ((H, W), an int, or None
    entries to keep that input size). Uneven windows are two small matmuls."""
    if array_of(input).ndim not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got "
                           f"{shape_str(array_of(input).shape)}")
    if not isinstance(output_size, (int, np.integer)) and len(output_size) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    h, w = array_of(input).shape[-2:]
    sizes = (output_size,) * 2 if isinstance(output_size, (int, np.integer)) else output_size
    ho, wo = (h if sizes[0] is None else int(sizes[0]), w if sizes[1] is None else int(sizes[1]))
    if ho < 0 or wo < 0:
        raise RuntimeError(f"adaptive_avg_pool2d: output_size must be non-negative, got "
                           f"{(ho, wo)}")
    if (ho, wo) == (1, 1):
        return input.mean((-2, -1), keepdim=True)
    if ho and wo and h % ho == 0 and w % wo == 0:
        return avg_pool2d(input, (h // ho, w // wo))
    dtype = array_of(input).dtype
    rows = wrap(_adaptive_matrix(h, ho, dtype))
    cols = wrap(_adaptive_matrix(w, wo, dtype).T.copy())
    return rows.matmul(input.matmul(cols))
