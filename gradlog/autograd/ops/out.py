"""``out=`` for the arithmetic and matrix-product functions (``gl.mul(a, b, out=c)``), with
PyTorch's rules.

The result is computed without a graph and written into ``out``, which is returned: a write,
so ``out``'s version goes up and an inference tensor refuses it outside inference mode. As in
PyTorch, ``out=`` does not take part in autograd: with grad mode on, an input or ``out`` that
requires grad is an error. An ``out`` of another shape is resized (with PyTorch's warning unless
it was empty); a result that cannot be cast to ``out``'s dtype is an error.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np

from ..grad_mode import no_grad
from ..grad_mode import state as _mode
from ..tensor import Tensor
from . import arithmetic, linalg
from ._util import check_cast

__all__ = ["with_out", *arithmetic.__all__, "matmul", "mm", "bmm", "dot", "outer"]


def with_out(fn: Any) -> Any:
    """``fn`` accepting ``out=``; without it, ``fn`` itself runs."""
    @functools.wraps(fn)
    def function(*args: Any, out: Tensor | None = None, **kwargs: Any) -> Tensor:
        if out is None:
            return fn(*args, **kwargs)
        return _write_out(fn.__name__, out, fn, args, kwargs)
    return function


def _write_out(name: str, out: Any, fn: Any, args: tuple, kwargs: dict) -> Tensor:
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    inputs = (*args, *kwargs.values())
    if _mode.grad_enabled and (out._requires_grad or any(
            isinstance(a, Tensor) and a._requires_grad for a in inputs)):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic "
                           "differentiation, but one of the arguments requires grad.")
    out._check_inplace()
    with no_grad():
        result = fn(*args, **kwargs)
    check_cast(result._data.dtype, out._data.dtype)
    if result._data.shape != out._data.shape:
        if out._data.size:
            warnings.warn(
                f"An output with one or more elements was resized since it had shape "
                f"{list(out._data.shape)}, which does not match the required output shape "
                f"{list(result._data.shape)}. This behavior is deprecated, and in a future "
                "PyTorch release outputs will not be resized unless they have zero elements. "
                "You can explicitly reuse an out tensor t by resizing it, inplace, to zero "
                "elements with t.resize_(0).", UserWarning, stacklevel=3)
        out._data = np.empty(result._data.shape, out._data.dtype)
    np.copyto(out._data, result._data, casting="unsafe")
    out._bump_version()
    return out


add = with_out(arithmetic.add)
sub = with_out(arithmetic.sub)
subtract = with_out(arithmetic.subtract)
mul = with_out(arithmetic.mul)
multiply = with_out(arithmetic.multiply)
div = with_out(arithmetic.div)
divide = with_out(arithmetic.divide)
true_divide = with_out(arithmetic.true_divide)
pow = with_out(arithmetic.pow)
neg = with_out(arithmetic.neg)
negative = with_out(arithmetic.negative)
rsub = arithmetic.rsub  # (PyTorch's rsub has no out=)
square = with_out(arithmetic.square)
reciprocal = with_out(arithmetic.reciprocal)
floor_divide = with_out(arithmetic.floor_divide)
remainder = with_out(arithmetic.remainder)
matmul = with_out(linalg.matmul)
mm = with_out(linalg.mm)
bmm = with_out(linalg.bmm)
dot = with_out(linalg.dot)
outer = with_out(linalg.outer)
