"""Matrix products: matmul (1-D to N-D with batch broadcasting), mm, bmm, dot, outer, and the
fused ``linear`` (x @ W.T + b) that Linear layers use."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..function import Op
from ..tensor import Tensor
from ._util import unbroadcast

__all__ = ["matmul", "mm", "bmm", "dot", "outer", "linear"]


def _fmt(shape: tuple) -> str:
    return "x".join(str(s) for s in shape)


def _check_matmul(a: np.ndarray, b: np.ndarray) -> None:
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{a.ndim}D and {b.ndim}D")
    if a.ndim == 1 and b.ndim == 1:
        if a.shape[0] != b.shape[0]:
            raise RuntimeError(
                f"inconsistent tensor size, expected tensor [{a.shape[0]}] and src "
                f"[{b.shape[0]}] to have the same number of elements, but got {a.shape[0]} "
                f"and {b.shape[0]} elements respectively")
        return
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        sa = a.shape if a.ndim > 1 else (1,) + a.shape
        sb = b.shape if b.ndim > 1 else b.shape + (1,)
        if a.ndim <= 2 and b.ndim <= 2:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_fmt(sa)} and "
                               f"{_fmt(sb)})")
        raise RuntimeError(f"matmul shapes cannot be multiplied: {list(a.shape)} @ "
                           f"{list(b.shape)} (inner dimensions {k_a} and {k_b} differ)")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2] if b.ndim > 1 else ())
    except ValueError:
        raise RuntimeError(f"matmul batch dimensions cannot be broadcast: {list(a.shape)} @ "
                           f"{list(b.shape)}") from None


class Matmul(Op):
    node_name = "MmBackward0"

    @staticmethod
    def forward(ctx, a, b):
        _check_matmul(a, b)
        ctx.save_for_backward(a, b)
        return np.matmul(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        ad, bd = a._data.ndim, b._data.ndim
        if ad == 2 and bd == 2:
            return (g.matmul(b.t()) if na else None, a.t().matmul(g) if nb else None)
        if ad == 1 and bd == 1:
            return (g * b if na else None, g * a if nb else None)
        A = a if ad > 1 else a.unsqueeze(0)
        B = b if bd > 1 else b.unsqueeze(-1)
        G = g
        if ad == 1:
            G = G.unsqueeze(-2)
        if bd == 1:
            G = G.unsqueeze(-1)
        ga = gb = None
        if na:
            ga = unbroadcast(G.matmul(B.mT), A._data.shape).reshape(a._data.shape)
        if nb:
            gb = unbroadcast(A.mT.matmul(G), B._data.shape).reshape(b._data.shape)
        return ga, gb


class BatchMatmul(Matmul):
    node_name = "BmmBackward0"


class UnsafeViewMatmul(Matmul):
    node_name = "UnsafeViewBackward0"


class Dot(Matmul):
    node_name = "DotBackward0"


class Mv(Matmul):
    node_name = "MvBackward0"


def _promote_pair(a: Tensor, b: Tensor) -> tuple:
    if a._data.dtype != b._data.dtype:
        from .arithmetic import _promote
        return _promote(a, b)
    return a, b


def matmul(input: Tensor, other: Tensor) -> Tensor:
    """Matrix product with NumPy/PyTorch broadcasting rules for 1-D and batched operands."""
    if not isinstance(other, Tensor):
        raise TypeError(f"matmul(): argument 'other' must be Tensor, not {type(other).__name__}")
    input, other = _promote_pair(input, other)
    na, nb = input._data.ndim, other._data.ndim
    if na > 2 or nb > 2:
        return UnsafeViewMatmul.apply(input, other)
    if nb == 1:
        return (Dot if na == 1 else Mv).apply(input, other)
    return Matmul.apply(input, other)


def _rmatmul(self: Tensor, other: Any) -> Tensor:
    from ._util import tensor_operand
    return matmul(tensor_operand(other, self), self)


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    if input._data.ndim != 2 or mat2._data.ndim != 2:
        raise RuntimeError("self must be a matrix" if input._data.ndim != 2
                           else "mat2 must be a matrix")
    return matmul(input, mat2)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    if input._data.ndim != 3 or mat2._data.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor" if input._data.ndim != 3
                           else "batch2 must be a 3D tensor")
    if input._data.shape[0] != mat2._data.shape[0]:
        raise RuntimeError(f"batch1 and batch2 must have same number of batches, got "
                           f"{input._data.shape[0]} and {mat2._data.shape[0]}")
    input, mat2 = _promote_pair(input, mat2)
    return BatchMatmul.apply(input, mat2)


def dot(input: Tensor, other: Tensor) -> Tensor:
    if input._data.ndim != 1 or other._data.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input._data.ndim}D and "
                           f"{other._data.ndim}D tensors")
    return matmul(input, other)


def outer(input: Tensor, vec2: Tensor) -> Tensor:
    return input.unsqueeze(1) * vec2.unsqueeze(0)


class Linear(Op):
    """``x @ W.T + b`` in one node (PyTorch's addmm): one matmul and an in-place bias add.

    The arguments come in the order of PyTorch's ``addmm(bias, input, weight.t())``, so the
    leaf sinks become ready, and their hooks fire, in PyTorch's order."""

    node_name = "AddmmBackward0"

    @staticmethod
    def forward(ctx, b, x, w):
        if x.shape[-1] != w.shape[1]:
            rows = int(np.prod(x.shape[:-1])) if x.ndim > 1 else 1
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{x.shape[-1]} "
                               f"and {w.shape[1]}x{w.shape[0]})")
        ctx.save_for_backward(x, w)
        out = np.matmul(x, w.T)
        if b is not None:
            out += b
        return out

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        wanted = ctx.needs_input_grad
        if not any(wanted):
            return None, None, None
        grads = iter(LinearGrad.apply(g, x, w, wanted))
        return tuple(next(grads) if n else None for n in wanted)


def _rows(a: Any) -> Any:
    """An array or tensor as a matrix of its last dimension's rows (N-D inputs of Linear)."""
    return a if a.ndim == 2 else a.reshape(-1, a.shape[-1])


class LinearGrad(Op):
    """Linear's gradients for (bias, input, weight) from ``g`` in one node, as PyTorch's addmm
    backward computes them together: ``g.sum(0)``, ``g @ W``, ``g.T @ x``. Only the ``wanted``
    ones are computed and returned, in that order. Its backward is written with tensor ops, so
    Linear has a double backward."""

    node_name = "AddmmBackwardBackward0"

    @staticmethod
    def forward(ctx, g, x, w, wanted):
        nb, nx, nw = wanted
        ctx.wanted = wanted
        ctx.save_for_backward(g, x, w)
        g2 = _rows(g)
        out = []
        if nb:
            out.append(g2.sum(0))
        if nx:
            out.append(np.matmul(g, w))
        if nw:
            out.append(np.matmul(g2.T, _rows(x)))
        return tuple(out)

    @staticmethod
    def backward(ctx, *hs):
        g, x, w = ctx.saved_tensors
        given = iter(hs)
        hb, hx, hw = (next(given) if n else None for n in ctx.wanted)
        ng, nx, nw, _ = ctx.needs_input_grad
        gg = gx = gw = None
        if ng:  # d/dg of <hb, sum g> + <hx, g W> + <hw, g.T x>
            terms = []
            if hb is not None:
                terms.append(hb.expand(g.shape))
            if hx is not None:
                terms.append(hx.matmul(w.t()))
            if hw is not None:
                terms.append(_rows(x).matmul(hw.t()).reshape(g.shape))
            for t in terms:
                gg = t if gg is None else gg + t
        if nx and hw is not None:
            gx = _rows(g).matmul(hw).reshape(x.shape)
        if nw and hx is not None:
            gw = _rows(g).t().matmul(_rows(hx))
        return gg, gx, gw, None


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias`` (``nn.functional.linear``)."""
    if input._data.ndim == 0:
        raise RuntimeError("linear(): input must be at least 1-D")
    if weight._data.ndim != 2:
        raise RuntimeError(f"linear(): weight must be 2-D, got shape {list(weight._data.shape)}")
    if input._data.dtype != weight._data.dtype:
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got "
                           f"{input.dtype.name.title()} and {weight.dtype.name.title()}")
    if bias is not None and bias._data.shape not in ((weight._data.shape[0],), ()):
        raise RuntimeError(f"linear(): bias of shape {list(bias._data.shape)} does not match "
                           f"{weight._data.shape[0]} output features")
    return Linear.apply(bias, input, weight)


TENSOR_METHODS = {
    "matmul": matmul, "__matmul__": matmul, "__rmatmul__": _rmatmul, "mm": mm, "bmm": bmm,
    "dot": dot, "outer": outer,
}
