"""Array helpers shared by convolution and pooling: padding, the strided view of every kernel
position, im2col and col2im. Everything here works on numpy arrays in NCHW layout.

The loops run over kernel positions (``kh * kw``, typically 4 or 9), never over batch
elements or pixels: each iteration is one vectorized numpy call on a strided view.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


@dataclass(frozen=True, slots=True)
class Geometry:
    """Where each output pixel of a 2-d windowed op reads its input.

    ``pad`` is (top, bottom, left, right) around the (H, W) input; bottom/right may include
    extra rows that ceil-mode pooling windows hang over.
    """

    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad: tuple[int, int, int, int]
    groups: int = 1

    @property
    def padded_hw(self) -> tuple[int, int]:
        (h, w), (t, b, l, r) = self.in_hw, self.pad
        return h + t + b, w + l + r


def padded(x: np.ndarray, geom: Geometry, value: float = 0.0) -> np.ndarray:
    """``x`` inside a border filled with ``value`` (``x`` itself when there is no border)."""
    t, b, l, r = geom.pad
    if not (t or b or l or r):
        return x
    h, w = geom.in_hw
    hp, wp = geom.padded_hw
    out = (np.zeros if value == 0 else np.empty)(x.shape[:-2] + (hp, wp), dtype=x.dtype)
    if value != 0:
        out.fill(value)
    out[..., t:t + h, l:l + w] = x
    return out


def kernel_views(xp: np.ndarray, geom: Geometry) -> Iterator[tuple[int, int, np.ndarray]]:
    """For each kernel position (i, j) in row-major order, the (..., Ho, Wo) strided view of
    the padded input ``xp`` that this position reads for every output pixel."""
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = geom.kernel, geom.stride, geom.dilation, \
        geom.out_hw
    for i in range(kh):
        rows = slice(i * dh, i * dh + sh * (ho - 1) + 1, sh)
        for j in range(kw):
            yield i, j, xp[..., rows, j * dw:j * dw + sw * (wo - 1) + 1:sw]


def im2col(x: np.ndarray, geom: Geometry) -> np.ndarray:
    """The (N, C*kh*kw, Ho*Wo) patch matrix of ``x`` (N, C, H, W), rows ordered (c, i, j)
    like a flattened (O, C, kh, kw) weight, so a convolution is one matmul."""
    xp = padded(x, geom)
    (kh, kw), (sh, sw), (dh, dw), (ho, wo) = geom.kernel, geom.stride, geom.dilation, \
        geom.out_hw
    win = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    win = win[:, :, :sh * (ho - 1) + 1:sh, :sw * (wo - 1) + 1:sw, ::dh, ::dw]
    n, c = x.shape[:2]
    return win.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, ho * wo)


def col2im(cols: np.ndarray, geom: Geometry) -> np.ndarray:
    """The adjoint of :func:`im2col`: add each patch entry of ``cols`` (N, C, kh, kw, Ho, Wo)
    back onto the input pixel it was read from; returns (N, C, H, W)."""
    n, c = cols.shape[:2]
    dxp = np.zeros((n, c) + geom.padded_hw, dtype=cols.dtype)
    for i, j, view in kernel_views(dxp, geom):
        view += cols[:, :, i, j]
    return unpadded(dxp, geom)


def unpadded(xp: np.ndarray, geom: Geometry) -> np.ndarray:
    """The (H, W) interior of a padded array (a view)."""
    t, _, l, _ = geom.pad
    h, w = geom.in_hw
    if xp.shape[-2:] == (h, w):
        return xp
    return xp[..., t:t + h, l:l + w]
