"""Resampling: ``pad`` (constant mode) and ``interpolate`` (nearest, bilinear).

Interpolation along each spatial axis is a small constant matrix, so resizing is two matmuls
(H then W) and differentiable through the engine's matmul; the matrices follow PyTorch's
source-index rules (computed in the input's precision, like its CPU kernels).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...autograd.function import Op
from ...autograd.tensor import Tensor, array_of, wrap
from ._utils import shape_str

__all__ = ["pad", "interpolate"]


class ConstantPad(Op):
    """Pad (or crop, for negative amounts) the last dimensions; ``pads`` is one
    (before, after) pair per dimension, first dimension first."""

    node_name = "ConstantPadNdBackward0"

    @staticmethod
    def forward(ctx, x, pads, value):
        lead = x.ndim - len(pads)
        shape = x.shape[:lead] + tuple(n + a + b for n, (a, b) in zip(x.shape[lead:], pads))
        out = np.full(shape, value, dtype=x.dtype) if value else np.zeros(shape, x.dtype)
        src = (Ellipsis,) + tuple(slice(max(-a, 0), n - max(-b, 0))
                                  for n, (a, b) in zip(x.shape[lead:], pads))
        dst = (Ellipsis,) + tuple(slice(max(a, 0), m - max(b, 0))
                                  for m, (a, b) in zip(shape[lead:], pads))
        out[dst] = x[src]
        ctx.pads = pads
        return out

    @staticmethod
    def backward(ctx, g):
        return ConstantPad.apply(g, tuple((-a, -b) for a, b in ctx.pads), 0), None, None


def pad(input: Tensor, pad: Any, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dimensions; ``pad`` lists (left, right) of the last
    dimension first, as in PyTorch. Negative amounts crop."""
    if mode != "constant":
        raise NotImplementedError(f"pad: mode '{mode}' is not supported by gradlog (only "
                                  "'constant')")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    ndim = array_of(input).ndim
    if len(pad) // 2 > ndim:
        raise RuntimeError(f"Padding length should be less than or equal to two times the input "
                           f"dimension but got padding length {len(pad)} and input of dimension "
                           f"{ndim}")
    pairs = tuple((pad[i], pad[i + 1]) for i in range(0, len(pad), 2))[::-1]
    lead = ndim - len(pairs)
    for d, (a, b) in enumerate(pairs):
        n = array_of(input).shape[lead + d]
        if n + a + b < 0:
            raise RuntimeError(f"The input size {n}, plus negative padding {a} and {b} resulted "
                               f"in a negative output size, which is invalid. Check dimension "
                               f"{lead + d} of your input.")
    return ConstantPad.apply(input, pairs, 0.0 if value is None else value)


_MODES = ("nearest", "bilinear")


def _scale(n_in: int, n_out: int, factor: float | None, align_corners: bool,
           dtype: np.dtype) -> np.floating:
    if align_corners:
        return dtype.type((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    if factor is not None:
        return dtype.type(1.0 / factor)
    return dtype.type(n_in / n_out)


def _matrix(n_in: int, n_out: int, factor: float | None, mode: str, align_corners: bool,
            dtype: np.dtype) -> np.ndarray:
    """(n_out, n_in) matrix taking a signal of length n_in to n_out samples; source positions
    are computed in the input's precision, as PyTorch's kernels do."""
    scale = _scale(n_in, n_out, factor, align_corners, dtype)
    dst = np.arange(n_out, dtype=dtype)
    m = np.zeros((n_out, n_in), dtype=dtype)
    rows = np.arange(n_out)
    if mode == "nearest":
        src = np.minimum(np.floor(dst * scale).astype(np.int64), n_in - 1)
        m[rows, src] = 1
        return m
    if align_corners:
        src = dst * scale
    else:
        half = dtype.type(0.5)
        src = np.maximum((dst + half) * scale - half, dtype.type(0))
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    np.add.at(m, (rows, lo), 1 - frac)
    np.add.at(m, (rows, hi), frac)
    return m


def _output_size(shape: tuple, size: Any, scale_factor: Any) -> tuple:
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined" if size is not None
                         else "either size or scale_factor should be defined")
    n = len(shape)
    if size is not None:
        sizes = (size,) * n if isinstance(size, (int, np.integer)) else tuple(size)
        if len(sizes) != n:
            raise ValueError(f"Input and output must have the same number of spatial dimensions, "
                             f"but got input with spatial dimensions of {list(shape)} and output "
                             f"size of {tuple(sizes)}. Please provide input tensor in (N, C, d1, "
                             "d2, ...,dK) format and output size in (o1, o2, ...,oK) format.")
        return tuple(int(s) for s in sizes), (None,) * n
    factors = (scale_factor,) * n if isinstance(scale_factor, (int, float)) \
        else tuple(scale_factor)
    if len(factors) != n:
        raise ValueError(f"Input and scale_factor must have the same number of spatial "
                         f"dimensions, but got input with spatial dimensions of {list(shape)} and "
                         f"scale_factor of shape {tuple(factors)}.")
    return tuple(math.floor(s * f) for s, f in zip(shape, factors)), tuple(map(float, factors))


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None,
                mode: str = "nearest", align_corners: bool | None = None,
                recompute_scale_factor: bool | None = None, antialias: bool = False) -> Tensor:
    """Resize the spatial dimensions of (N, C, H, W) (or (N, C, L) for nearest) input, e.g. a
    Grad-CAM map up to the image size."""
    if mode not in _MODES:
        raise NotImplementedError(f"interpolate: mode '{mode}' is not supported by gradlog "
                                  f"(supported: {', '.join(_MODES)})")
    if align_corners is not None and mode == "nearest":
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if antialias:
        raise NotImplementedError("interpolate: antialias is not supported by gradlog")
    ndim = array_of(input).ndim
    if mode == "bilinear" and ndim != 4:
        raise NotImplementedError(f"Got {ndim}D input, but bilinear mode needs 4D input")
    if ndim not in (3, 4):
        raise NotImplementedError(f"interpolate: expected 3D or 4D input (N, C, ...), got input "
                                  f"of size {shape_str(array_of(input).shape)}")
    if array_of(input).dtype.kind != "f":
        raise RuntimeError(f"interpolate: expected a floating-point input, got "
                           f"{array_of(input).dtype}")
    spatial = array_of(input).shape[2:]
    out_size, factors = _output_size(spatial, size, scale_factor)
    if recompute_scale_factor:
        factors = (None,) * len(factors)
    dtype = array_of(input).dtype
    mats = [_matrix(n, o, f, mode, bool(align_corners), dtype)
            for n, o, f in zip(spatial, out_size, factors)]
    out = input.matmul(wrap(np.ascontiguousarray(mats[-1].T)))
    if len(mats) == 2:
        out = wrap(mats[0]).matmul(out)
    return out
