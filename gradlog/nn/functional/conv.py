"""Convolutions: ``conv2d`` (and ``conv1d`` on top of it).

A convolution is im2col (a strided view of the padded input, copied once into a patch matrix)
followed by one batched matmul with the flattened weight. Its two gradients are themselves
ops, each the adjoint of the forward in one argument, so the three close under
differentiation and double backward works:

* ``Convolution(x, w)``             = conv(x, w)
* ``ConvolutionInputGrad(g, w)``    = d conv / dx, applied to g     (col2im of w^T g)
* ``ConvolutionWeightGrad(x, g)``   = d conv / dw, applied to g     (g times the patches of x)

The forward keeps the patch matrix for the weight gradient (when the weight needs one), so the
backward does not rebuild it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.function import Op
from ...autograd.tensor import Tensor, array_of
from ._utils import check_same_dtype, pair, shape_str
from ._windows import Geometry, col2im, im2col

__all__ = ["conv2d", "conv1d"]


def _flat_weight(w: np.ndarray, groups: int) -> np.ndarray:
    """(O, Cg, kh, kw) as (O, K) for one group, (G, O/G, K) for several."""
    if groups == 1:
        return w.reshape(w.shape[0], -1)
    return w.reshape(groups, w.shape[0] // groups, -1)


def _grouped(a: np.ndarray, groups: int) -> np.ndarray:
    """(N, R, L) as (N, G, R/G, L) when there are several groups."""
    return a if groups == 1 else a.reshape(a.shape[0], groups, -1, a.shape[-1])


class Convolution(Op):
    node_name = "ConvolutionBackward0"

    @staticmethod
    def forward(ctx, x, w, b, geom):
        cols = im2col(x, geom)
        out = np.matmul(_flat_weight(w, geom.groups), _grouped(cols, geom.groups))
        out = out.reshape((x.shape[0], w.shape[0]) + geom.out_hw)
        if b is not None:
            out += b.reshape(-1, 1, 1)
        ctx.geom = geom
        # the patches are reused by the weight gradient
        ctx.save_for_backward(x, w, cols if ctx.needs_input_grad[1] else None)
        return out

    @staticmethod
    def backward(ctx, g):
        x, w, cols = ctx.saved_tensors
        nx, nw, nb, _ = ctx.needs_input_grad
        geom = ctx.geom
        cols = None if cols is None else array_of(cols)
        gx = ConvolutionInputGrad.apply(g, w, geom) if nx else None
        gw = ConvolutionWeightGrad.apply(x, g, geom, cols) if nw else None
        gb = g.sum((0, 2, 3)) if nb else None
        return gx, gw, gb, None


class ConvolutionInputGrad(Op):
    """``g`` (N, O, Ho, Wo) pulled back to the input: col2im(w^T g)."""

    node_name = "ConvolutionBackwardBackward0"

    @staticmethod
    def forward(ctx, g, w, geom):
        n, groups = g.shape[0], geom.groups
        wt = _flat_weight(w, groups)
        wt = wt.T if groups == 1 else wt.transpose(0, 2, 1)
        g3 = _grouped(g.reshape(n, g.shape[1], -1), groups)
        cols = np.matmul(wt, g3)
        c = w.shape[1] * groups
        ctx.geom = geom
        ctx.save_for_backward(g, w)
        return col2im(cols.reshape((n, c) + geom.kernel + geom.out_hw), geom)

    @staticmethod
    def backward(ctx, h):
        g, w = ctx.saved_tensors
        ng, nw, _ = ctx.needs_input_grad
        geom = ctx.geom
        return (Convolution.apply(h, w, None, geom) if ng else None,
                ConvolutionWeightGrad.apply(h, g, geom, None) if nw else None, None)


class ConvolutionWeightGrad(Op):
    """``g`` (N, O, Ho, Wo) pulled back to the weight: the sum over the batch of g times the
    patches of ``x`` (``cols`` when the forward already built them)."""

    node_name = "ConvolutionBackwardBackward0"

    @staticmethod
    def forward(ctx, x, g, geom, cols):
        if cols is None:
            cols = im2col(x, geom)
        n, o, groups = x.shape[0], g.shape[1], geom.groups
        g3 = _grouped(g.reshape(n, o, -1), groups)
        cols = _grouped(cols, groups)
        gw = np.matmul(g3, cols.swapaxes(-1, -2)).sum(0)
        ctx.geom = geom
        ctx.save_for_backward(x, g)
        return gw.reshape((o, x.shape[1] // groups) + geom.kernel)

    @staticmethod
    def backward(ctx, h):
        x, g = ctx.saved_tensors
        nx, ng, _, _ = ctx.needs_input_grad
        geom = ctx.geom
        return (ConvolutionInputGrad.apply(g, h, geom) if nx else None,
                Convolution.apply(x, h, None, geom) if ng else None, None, None)


def _same_padding(kernel: tuple, dilation: tuple, stride: tuple) -> tuple:
    if any(s != 1 for s in stride):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    pads = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        pads += [total // 2, total - total // 2]  # the odd extra row goes after, as PyTorch
    return tuple(pads)


def conv_padding(padding: Any, kernel: tuple, dilation: tuple, stride: tuple) -> tuple:
    """(top, bottom, left, right) from an int, a pair, ``'same'`` or ``'valid'``."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding == "same":
            return _same_padding(kernel, dilation, stride)
        raise ValueError(f"Invalid padding string '{padding}', should be one of "
                         "{'same', 'valid'}")
    ph, pw = pair(padding, "padding")
    if ph < 0 or pw < 0:
        raise RuntimeError("negative padding is not supported")
    return (ph, ph, pw, pw)


def conv_geometry(x_shape: tuple, w_shape: tuple, stride: Any, padding: Any, dilation: Any,
                  groups: int) -> Geometry:
    """Check a conv2d call's shapes (PyTorch's messages) and compute its output size."""
    n, c, h, w = x_shape
    o, cg, kh, kw = w_shape
    stride, dilation = pair(stride, "stride"), pair(dilation, "dilation")
    if min(stride) <= 0:
        raise RuntimeError("non-positive stride is not supported")
    if min(dilation) <= 0:
        raise RuntimeError("dilation should be greater than zero")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if c != cg * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {shape_str(w_shape)}, expected "
                           f"input{shape_str(x_shape)} to have {cg * groups} channels, but got "
                           f"{c} channels instead")
    if o % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at "
                           f"dimension 0, but got weight of size {shape_str(w_shape)} instead")
    pad = conv_padding(padding, (kh, kw), dilation, stride)
    hp, wp = h + pad[0] + pad[1], w + pad[2] + pad[3]
    ekh, ekw = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    if hp < ekh or wp < ekw:
        raise RuntimeError(f"Calculated padded input size per channel: ({hp} x {wp}). Kernel "
                           f"size: ({ekh} x {ekw}). Kernel size can't be greater than actual "
                           "input size")
    out = ((hp - ekh) // stride[0] + 1, (wp - ekw) // stride[1] + 1)
    return Geometry((h, w), out, (kh, kw), stride, dilation, pad, groups)


def _check_bias(weight: Tensor, bias: Tensor | None) -> None:
    if bias is None:
        return
    w, b = array_of(weight).shape, array_of(bias).shape
    if b != (w[0],):
        raise RuntimeError(f"Given weight of size {shape_str(w)}, expected bias to be "
                           f"1-dimensional with {w[0]} elements, but got bias of size "
                           f"{shape_str(b)} instead")


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-d cross-correlation of ``input`` (N, C, H, W) or (C, H, W) with ``weight``
    (O, C/groups, kH, kW); ``padding`` is an int, a pair, ``'same'`` or ``'valid'``."""
    if array_of(input).ndim not in (3, 4):
        raise RuntimeError("Expected 3D (unbatched) or 4D (batched) input to conv2d, but got "
                           f"input of size: {shape_str(array_of(input).shape)}")
    if array_of(weight).ndim != 4:
        raise RuntimeError(f"conv2d expects a 4-D weight (out_channels, in_channels/groups, kH, "
                           f"kW), but got weight of size {shape_str(array_of(weight).shape)}")
    unbatched = array_of(input).ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    check_same_dtype(x, weight)
    check_same_dtype(x, bias)
    geom = conv_geometry(array_of(x).shape, array_of(weight).shape, stride, padding, dilation,
                         groups)
    _check_bias(weight, bias)
    out = Convolution.apply(x, weight, bias, geom)
    return out.squeeze(0) if unbatched else out


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """1-d cross-correlation of ``input`` (N, C, L) or (C, L) with ``weight`` (O, C/groups, k),
    computed as a conv2d of height 1."""
    if array_of(input).ndim not in (2, 3):
        raise RuntimeError("Expected 2D (unbatched) or 3D (batched) input to conv1d, but got "
                           f"input of size: {shape_str(array_of(input).shape)}")
    if array_of(weight).ndim != 3:
        raise RuntimeError(f"conv1d expects a 3-D weight (out_channels, in_channels/groups, k), "
                           f"but got weight of size {shape_str(array_of(weight).shape)}")
    unbatched = array_of(input).ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    c, cg = array_of(x).shape[1], array_of(weight).shape[1]
    if c != cg * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size "
                           f"{shape_str(array_of(weight).shape)}, expected input"
                           f"{shape_str(array_of(x).shape)} to have {cg * groups} channels, "
                           f"but got {c} channels instead")
    pad = padding if isinstance(padding, str) else (0, *_single(padding, "padding"))
    out = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, *_single(stride, "stride")),
                 pad, (1, *_single(dilation, "dilation")), groups)
    out = out.squeeze(2)
    return out.squeeze(0) if unbatched else out


def _single(value: Any, name: str) -> tuple[int]:
    if isinstance(value, (int, np.integer)):
        return (int(value),)
    value = tuple(value)
    if len(value) != 1:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of 1 values "
                           f"to match the convolution dimensions, but got {name}={list(value)}")
    return (int(value[0]),)
