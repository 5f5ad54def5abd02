"""Arithmetic with broadcasting: add, sub, mul, div, pow, neg (and the reflected forms)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..function import Op
from ..tensor import Tensor, wrap
from ._util import (
    as_float,
    check_broadcast,
    is_number,
    python_scalar,
    result_dtype,
    scalar_result_dtype,
    tensor_operand,
    unbroadcast,
)

__all__ = ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "pow",
           "neg", "negative", "rsub", "square", "reciprocal", "floor_divide", "remainder"]


_ndarray = np.ndarray  # a module global: numpy's module __getattr__ makes np.ndarray slow


def _shape(x: Any) -> tuple:
    return x.shape if isinstance(x, np.ndarray) else ()


def _shapes(a: Any, b: Any) -> tuple | None:
    """The operands' shapes when they differ (broadcasting: the backward sums the gradient back
    to each shape), else None."""
    sa, sb = _shape(a), _shape(b)
    return None if sa == sb else (sa, sb)


def _to_shapes(shapes: tuple | None, ga: Tensor | None, gb: Tensor | None) -> tuple:
    """The two operands' gradients summed back to their shapes (see ``_shapes``)."""
    if shapes is None:
        return ga, gb
    return (None if ga is None else unbroadcast(ga, shapes[0]),
            None if gb is None else unbroadcast(gb, shapes[1]))


class Add(Op):
    node_name = "AddBackward0"
    number_inputs = (1,)

    @staticmethod
    def forward(ctx, a, b):
        na, nb = ctx.needs_input_grad
        if na or nb:  # (a is the tensor's array; the common case tested inline)
            ctx.shapes = None if b.__class__ is _ndarray and a.shape == b.shape \
                else _shapes(a, b)
        return a + b

    @staticmethod
    def backward(ctx, g):
        na, nb = ctx.needs_input_grad
        shapes = ctx.shapes
        if shapes is None:  # (the common case inline)
            return g if na else None, g if nb else None
        return _to_shapes(shapes, g if na else None, g if nb else None)


class Sub(Op):
    node_name = "SubBackward0"
    number_inputs = (1,)

    @staticmethod
    def forward(ctx, a, b):  # (a is a number for Rsub)
        na, nb = ctx.needs_input_grad
        if na or nb:
            ctx.shapes = _shapes(a, b)
        return a - b

    @staticmethod
    def backward(ctx, g):
        na, nb = ctx.needs_input_grad
        return _to_shapes(ctx.shapes, g if na else None, -g if nb else None)


class Rsub(Sub):
    node_name = "RsubBackward1"


class Mul(Op):
    node_name = "MulBackward0"
    number_inputs = (1,)

    @staticmethod
    def forward(ctx, a, b):
        na, nb = ctx.needs_input_grad
        if na or nb:  # save only what the backward needs (in PyTorch's order: other, self)
            ctx.save_for_backward(b if na else None, a if nb else None)
            ctx.shapes = None if b.__class__ is _ndarray and a.shape == b.shape \
                else _shapes(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        b, a = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        ga = g * b if na else None
        gb = g * a if nb else None
        shapes = ctx.shapes
        return (ga, gb) if shapes is None else _to_shapes(shapes, ga, gb)


class Div(Op):
    node_name = "DivBackward0"
    number_inputs = (1,)

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        with np.errstate(divide="ignore", invalid="ignore"):  # x/0 is inf or nan, silently
            return np.true_divide(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        ga = unbroadcast(g / b, a._data.shape) if na else None
        gb = unbroadcast(-g * a / (b * b), b._data.shape) if nb else None
        return ga, gb


class Neg(Op):
    node_name = "NegBackward0"

    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, g):
        return -g


class PowScalar(Op):
    """``tensor ** number``."""

    node_name = "PowBackward0"

    @staticmethod
    def forward(ctx, a, p):
        ctx.save_for_backward(a)
        ctx.p = p
        with np.errstate(divide="ignore", invalid="ignore"):  # 0 ** -1 is inf, silently
            return a ** p

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        p = ctx.p
        if p == 0:
            return g * 0, None
        if p == 1:
            return g, None
        if p == 2:
            return g * (a * 2), None
        return g * (a ** (p - 1) * p), None


class PowTensor(Op):
    """``tensor ** tensor``; the exponent's gradient is 0 where the base is 0."""

    node_name = "PowBackward1"

    @staticmethod
    def forward(ctx, a, b):
        with np.errstate(divide="ignore", invalid="ignore"):
            out = a ** b
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, g):
        a, b, out = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        ga = None
        if na:
            ga = g * b * a ** (b - 1)
            if (b._data == 0).any():  # x ** 0 is constant, also at x = 0 (not 0 * inf)
                ga = ga.where(b._data != 0, 0.0)
            ga = unbroadcast(ga, a._data.shape)
        gb = None
        if nb:
            safe = (a._data == 0) & (b._data >= 0)
            log_a = a.where(~safe, 1.0).log() if safe.any() else a.log()
            gb = unbroadcast(g * out * log_a, b._data.shape)
        return ga, gb


class RpowScalar(Op):
    """``number ** tensor``."""

    node_name = "PowBackward2"

    @staticmethod
    def forward(ctx, base, b):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.power(base, b)
        ctx.save_for_backward(out)
        ctx.log_base = float(np.log(base)) if base > 0 else (0.0 if base == 0 else np.nan)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return None, g * out * ctx.log_base


def _promote(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    dt = result_dtype(a._data, b._data)
    if a._data.dtype != dt:
        a = a.to(dt)
    if b._data.dtype != dt:
        b = b.to(dt)
    return a, b


def binary(op: type, a: Any, b: Any) -> Tensor:
    """Apply a binary op with PyTorch's dtype rules (``a`` is a tensor, ``b`` anything)."""
    if isinstance(b, Tensor):
        if a._data.dtype != b._data.dtype:
            a, b = _promote(a, b)
        try:
            return op.apply(a, b)
        except ValueError:
            check_broadcast(a._data.shape, b._data.shape)
            raise
    if is_number(b):
        dt = scalar_result_dtype(a._data, b)
        if dt != a._data.dtype:
            a = a.to(dt)
        return op.apply(a, python_scalar(b))
    return binary(op, a, tensor_operand(b, a))


def add(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    """``input + alpha * other``."""
    if alpha != 1:
        other = other * alpha
    if not isinstance(input, Tensor):
        return binary(Add, tensor_operand(other, None), input) if isinstance(other, Tensor) \
            else binary(Add, tensor_operand(input, None), other)
    return binary(Add, input, other)


_BOOL_SUB = ("Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
             "trying to invert a mask, use the `~` or `logical_not()` operator instead.")


def _refuse_bool(a: Any, b: Any) -> None:
    for x in (a, b):
        if (isinstance(x, Tensor) and x._data.dtype == np.bool_) or isinstance(x, (bool,
                                                                                  np.bool_)):
            raise RuntimeError(_BOOL_SUB)


def sub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    """``input - alpha * other``."""
    _refuse_bool(input, other)
    if alpha != 1:
        other = other * alpha
    if not isinstance(input, Tensor):
        return rsub(other, input)
    return binary(Sub, input, other)


def rsub(input: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    """``other - alpha * input``."""
    _refuse_bool(input, other)
    if alpha != 1:
        input = input * alpha
    if isinstance(other, Tensor):
        return binary(Sub, other, input)
    dt = scalar_result_dtype(input._data, other)
    if dt != input._data.dtype:
        input = input.to(dt)
    return Rsub.apply(python_scalar(other), input)


def mul(input: Any, other: Any) -> Tensor:
    if not isinstance(input, Tensor):
        input, other = other, input
        if not isinstance(input, Tensor):
            input = tensor_operand(input, None)
    return binary(Mul, input, other)


def div(input: Any, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    """True division (integers give floats); ``rounding_mode`` "trunc" or "floor" rounds."""
    if not isinstance(input, Tensor):
        input = tensor_operand(input, None)
    if rounding_mode is not None:
        return _rounded_div(input, other, rounding_mode)
    if not isinstance(other, Tensor) and not is_number(other):
        other = tensor_operand(other, input)
    # the promoted type, made floating: float16 / int stays float16, int / 0-d float64 is float64
    dt = result_dtype(input._data, other._data) if isinstance(other, Tensor) \
        else scalar_result_dtype(input._data, other)
    if dt.kind != "f":
        dt = dtypes.get_default_dtype().np
    if input._data.dtype != dt:
        input = input.to(dt)
    if isinstance(other, Tensor) and other._data.dtype != dt:
        other = other.to(dt)
    if not isinstance(other, Tensor):
        return Div.apply(input, python_scalar(other))
    try:
        return Div.apply(input, other)
    except ValueError:
        check_broadcast(input._data.shape, other._data.shape)
        raise


true_divide = divide = div


def _rounded_div(a: Tensor, b: Any, mode: str) -> Tensor:
    bd = b._data if isinstance(b, Tensor) else b
    if mode == "floor":
        out = np.floor_divide(a._data, bd) if a._data.dtype.kind != "f" else np.floor(a._data / bd)
    elif mode == "trunc":
        q = a._data / bd
        out = np.trunc(q).astype(result_dtype(a._data, np.asarray(bd)) if isinstance(
            b, Tensor) else scalar_result_dtype(a._data, b))
    else:
        raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but "
                         f"found '{mode}'")
    return wrap(np.asarray(out))


def rdiv(input: Tensor, other: Any) -> Tensor:
    """``other / input``: for a number, ``input.reciprocal() * other``, as PyTorch computes it."""
    if is_number(other):
        return reciprocal(input) * python_scalar(other)
    return div(tensor_operand(other, input), input)


def pow(input: Any, exponent: Any) -> Tensor:
    """``input ** exponent`` (tensor or number on either side)."""
    if not isinstance(input, Tensor):
        return _rpow(exponent, input)
    if isinstance(exponent, Tensor):
        return binary(PowTensor, input, exponent)
    if not is_number(exponent):
        return binary(PowTensor, input, tensor_operand(exponent, input))
    dt = scalar_result_dtype(input._data, exponent)
    if dt != input._data.dtype:
        input = input.to(dt)
    if input._data.dtype.kind in "iu" and exponent < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    return PowScalar.apply(input, python_scalar(exponent))


def _rpow(exponent: Tensor, base: Any) -> Tensor:
    if not isinstance(exponent, Tensor):
        raise TypeError("pow() needs a tensor operand")
    dt = scalar_result_dtype(exponent._data, base)
    if dt != exponent._data.dtype:
        exponent = exponent.to(dt)
    return RpowScalar.apply(python_scalar(base), exponent)


def neg(input: Tensor) -> Tensor:
    return Neg.apply(input)


negative = neg


subtract = sub
multiply = mul


def square(input: Tensor) -> Tensor:
    return pow(input, 2)


class Reciprocal(Op):
    node_name = "ReciprocalBackward0"

    @staticmethod
    def forward(ctx, a):
        with np.errstate(divide="ignore"):
            out = np.reciprocal(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return -g * (out * out)


def reciprocal(input: Tensor) -> Tensor:
    return Reciprocal.apply(as_float(input))


def floor_divide(input: Tensor, other: Any) -> Tensor:
    return div(input, other, rounding_mode="floor")


class Remainder(Op):
    """Python's modulo: ``a - b * floor(a / b)``, with the sign of the divisor."""

    node_name = "RemainderBackward0"

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.remainder(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        ga = unbroadcast(g, a._data.shape) if na else None
        gb = unbroadcast(-g * (a / b).floor(), b._data.shape) if nb else None
        return ga, gb


class RemainderTensor(Remainder):
    node_name = "RemainderBackward1"


def remainder(input: Any, other: Any) -> Tensor:
    if not isinstance(input, Tensor):
        input = tensor_operand(input, None)
    return binary(RemainderTensor if isinstance(other, Tensor) else Remainder, input, other)


def _operator(op: type) -> Any:
    """The method behind ``a + b`` or ``a * b``: two tensors of one dtype go straight to the op
    (numbers and mixed dtypes take ``binary``, for PyTorch's promotion)."""

    apply = op.apply

    def method(self: Tensor, other: Any) -> Tensor:
        if other.__class__ is not Tensor or self._data.dtype is not other._data.dtype:
            return binary(op, self, other)
        try:
            return apply(self, other)
        except ValueError:
            check_broadcast(self._data.shape, other._data.shape)
            raise

    return method


def _radd(self: Tensor, other: Any) -> Tensor:
    return binary(Add, self, other)


def _rmul(self: Tensor, other: Any) -> Tensor:
    return binary(Mul, self, other)


TENSOR_METHODS = {
    "add": add, "__add__": _operator(Add), "__radd__": _radd,
    "sub": sub, "subtract": sub, "__sub__": sub, "__rsub__": lambda self, other: rsub(self, other),
    "mul": mul, "multiply": mul, "__mul__": _operator(Mul), "__rmul__": _rmul,
    "div": div, "divide": div, "true_divide": div, "__truediv__": div, "__rtruediv__": rdiv,
    "__floordiv__": floor_divide, "floor_divide": floor_divide,
    "__rfloordiv__": lambda self, other: floor_divide(tensor_operand(other, self), self),
    "__mod__": remainder, "remainder": remainder,
    "pow": pow, "__pow__": pow, "__rpow__": lambda self, other: _rpow(self, other),
    "neg": neg, "negative": neg, "__neg__": neg, "__pos__": lambda self: self,
    "square": square, "reciprocal": reciprocal,
}
