"""Elementwise math: exp, log, sqrt, abs, sin, cos, clamp, and friends."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..function import Op
from ..tensor import Tensor, wrap
from ._util import as_float

__all__ = ["exp", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "abs", "sin",
           "cos", "tan", "clamp", "clip", "sign", "floor", "ceil", "round", "trunc", "frac",
           "erf"]


class Exp(Op):
    node_name = "ExpBackward0"

    @staticmethod
    def forward(ctx, a):
        out = np.exp(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out


class Expm1(Op):
    node_name = "Expm1Backward0"

    @staticmethod
    def forward(ctx, a):
        out = np.expm1(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * (out + 1)


class Log(Op):
    node_name = "LogBackward0"

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g / a


class Log2(Op):
    node_name = "Log2Backward0"

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log2(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g / (a * float(np.log(2.0)))


class Log10(Op):
    node_name = "Log10Backward0"

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log10(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g / (a * float(np.log(10.0)))


class Log1p(Op):
    node_name = "Log1PBackward0"

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log1p(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g / (a + 1)


class Sqrt(Op):
    node_name = "SqrtBackward0"

    @staticmethod
    def forward(ctx, a):
        with np.errstate(invalid="ignore"):
            out = np.sqrt(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        with np.errstate(divide="ignore", invalid="ignore"):
            return g / (out * 2)


class Rsqrt(Op):
    node_name = "RsqrtBackward0"

    @staticmethod
    def forward(ctx, a):
        with np.errstate(divide="ignore", invalid="ignore"):
            out = 1 / np.sqrt(a)
        ctx.save_for_backward(out)
        return out.astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * (out ** 3) * -0.5


class Abs(Op):
    node_name = "AbsBackward0"

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(np.sign(a))
        return np.abs(a)

    @staticmethod
    def backward(ctx, g):
        (sign,) = ctx.saved_tensors
        return g * sign


class Sin(Op):
    node_name = "SinBackward0"

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.sin(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * a.cos()


class Cos(Op):
    node_name = "CosBackward0"

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.cos(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * -a.sin()


class Tan(Op):
    node_name = "TanBackward0"

    @staticmethod
    def forward(ctx, a):
        out = np.tan(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * (out * out + 1)


class Clamp(Op):
    """Clamp to [min, max]; the gradient passes where the input was inside the bounds."""

    node_name = "ClampBackward1"

    @staticmethod
    def forward(ctx, a, lo, hi):
        out = a
        if lo is not None:
            out = np.maximum(out, lo)
        if hi is not None:
            out = np.minimum(out, hi)
        if out is a:
            out = a.copy()
        inside = np.ones(a.shape, dtype=bool)
        if lo is not None:
            inside &= a >= lo
        if hi is not None:
            inside &= a <= hi
        ctx.save_for_backward(inside.astype(a.dtype))
        return out.astype(a.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (inside,) = ctx.saved_tensors
        return g * inside, None, None


class ClampTensor(Op):
    node_name = "ClampBackward0"

    @staticmethod
    def forward(ctx, a, lo, hi):
        out = a
        inside = np.ones(np.broadcast_shapes(a.shape, *(np.shape(b) for b in (lo, hi)
                                                          if b is not None)), dtype=bool)
        if lo is not None:
            out = np.maximum(out, lo)
            inside &= a >= lo
        if hi is not None:
            out = np.minimum(out, hi)
            inside &= a <= hi
        ctx.save_for_backward(inside.astype(a.dtype))
        ctx.shape = a.shape
        return np.array(out, dtype=a.dtype)

    @staticmethod
    def backward(ctx, g):
        from ._util import unbroadcast
        (inside,) = ctx.saved_tensors
        return unbroadcast(g * inside, ctx.shape), None, None


def _bound(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x._data
    return x


def clamp(input: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """Limit values to [min, max] (either bound may be None; bounds may be tensors)."""
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        return ClampTensor.apply(input, _bound(min), _bound(max))
    if input._data.dtype.kind != "f" and any(isinstance(b, float) for b in (min, max)):
        input = as_float(input)
    return Clamp.apply(input, min, max)


clip = clamp


class _Piecewise(Op):
    """Rounding-like functions: piecewise constant, so their gradient is zero."""

    node_name = "RoundBackward0"
    fn = staticmethod(np.round)

    @classmethod
    def forward(cls, ctx, a):
        return cls.fn(a)

    @staticmethod
    def backward(ctx, g):
        return g * 0


class Floor(_Piecewise):
    node_name = "FloorBackward0"
    fn = staticmethod(np.floor)


class Ceil(_Piecewise):
    node_name = "CeilBackward0"
    fn = staticmethod(np.ceil)


class Trunc(_Piecewise):
    node_name = "TruncBackward0"
    fn = staticmethod(np.trunc)


class Sign(_Piecewise):
    node_name = "SignBackward0"
    fn = staticmethod(np.sign)


class Frac(Op):
    node_name = "FracBackward0"

    @staticmethod
    def forward(ctx, a):
        return a - np.trunc(a)

    @staticmethod
    def backward(ctx, g):
        return g


class RoundDecimals(_Piecewise):
    node_name = "RoundBackward1"

    @staticmethod
    def forward(ctx, a, decimals):
        return np.round(a, decimals)

    @staticmethod
    def backward(ctx, g):
        return g * 0, None


def round(input: Tensor, *, decimals: int = 0) -> Tensor:
    """Round half to even, to ``decimals`` decimal places."""
    if decimals:
        return RoundDecimals.apply(input, decimals)
    return _Piecewise.apply(input)


def _erf_array(x: np.ndarray) -> np.ndarray:
    """erf to ~1e-15 (float64): Maclaurin series for |x| < 2.5, continued fraction beyond."""
    x64 = np.asarray(x, dtype=np.float64)
    ax = np.abs(x64)
    out = np.empty_like(x64)
    small = ax < 2.5
    if small.any():
        z = x64[small]
        z2 = z * z
        term = z.copy()
        total = z.copy()
        n = 0
        while True:
            n += 1
            term = term * (-z2) / n
            add = term / (2 * n + 1)
            total += add
            if n > 8 and np.max(np.abs(add)) < 1e-17:
                break
        out[small] = total * (2.0 / np.sqrt(np.pi))
    big = ~small
    if big.any():
        z = ax[big]
        # erfc(z) = exp(-z^2)/sqrt(pi) * 1/(z + 1/2/(z + 1/(z + 3/2/(z + ...)))), from the tail
        frac = np.zeros_like(z)
        for k in range(60, 0, -1):
            frac = (k / 2.0) / (z + frac)
        erfc = np.exp(-z * z) / np.sqrt(np.pi) / (z + frac)
        out[big] = np.sign(x64[big]) * (1.0 - erfc)
    return out.astype(np.asarray(x).dtype, copy=False)


class Erf(Op):
    node_name = "ErfBackward0"

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return _erf_array(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * ((-(a * a)).exp() * float(2.0 / np.sqrt(np.pi)))


def _float_unary(op: type) -> Any:
    def fn(input: Tensor) -> Tensor:
        return op.apply(as_float(input))
    fn.__name__ = op.__name__.lower()
    return fn


exp = _float_unary(Exp)
expm1 = _float_unary(Expm1)
log = _float_unary(Log)
log2 = _float_unary(Log2)
log10 = _float_unary(Log10)
log1p = _float_unary(Log1p)
sqrt = _float_unary(Sqrt)
rsqrt = _float_unary(Rsqrt)
sin = _float_unary(Sin)
cos = _float_unary(Cos)
tan = _float_unary(Tan)
erf = _float_unary(Erf)


def abs(input: Tensor) -> Tensor:
    return Abs.apply(input)


def sign(input: Tensor) -> Tensor:
    return Sign.apply(input)


def floor(input: Tensor) -> Tensor:
    return Floor.apply(input) if input._data.dtype.kind == "f" else input.clone()


def ceil(input: Tensor) -> Tensor:
    return Ceil.apply(input) if input._data.dtype.kind == "f" else input.clone()


def trunc(input: Tensor) -> Tensor:
    return Trunc.apply(input) if input._data.dtype.kind == "f" else input.clone()


def frac(input: Tensor) -> Tensor:
    return Frac.apply(input)


def _nan_to_num(input: Tensor, nan: float = 0.0, posinf: Any = None, neginf: Any = None) -> Tensor:
    return wrap(np.nan_to_num(input._data, nan=nan, posinf=posinf, neginf=neginf))


TENSOR_METHODS = {
    "exp": exp, "expm1": expm1, "log": log, "log2": log2, "log10": log10, "log1p": log1p,
    "sqrt": sqrt, "rsqrt": rsqrt, "abs": abs, "__abs__": abs, "absolute": abs, "sin": sin,
    "cos": cos, "tan": tan, "clamp": clamp, "clip": clip, "sign": sign, "floor": floor,
    "ceil": ceil, "round": round, "trunc": trunc, "frac": frac, "erf": erf,
    "nan_to_num": _nan_to_num,
}
