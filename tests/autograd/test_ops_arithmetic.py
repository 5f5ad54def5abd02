"""Arithmetic with broadcasting: gradients against finite differences (float64)."""

import pytest
from opcheck import check_grad, const, pos

import gradlog as gl

CASES = {
    "add": (lambda a, b: a + b, (2, 3), (2, 3)),
    "add_broadcast_row": (lambda a, b: a + b, (2, 3), (3,)),
    "add_broadcast_both": (lambda a, b: a + b, (2, 1), (1, 3)),
    "add_zero_dim": (lambda a, b: a + b, (), (2, 3)),
    "add_scalar": (lambda a: a + 2.5, (2, 3)),
    "radd_scalar": (lambda a: 2.5 + a, (2, 3)),
    "add_alpha": (lambda a, b: gl.add(a, b, alpha=3), (2, 3), (3,)),
    "sub": (lambda a, b: a - b, (2, 3), (2, 3)),
    "sub_broadcast": (lambda a, b: a - b, (3,), (2, 3)),
    "rsub_scalar": (lambda a: 1.5 - a, (2, 3)),
    "sub_alpha": (lambda a, b: gl.sub(a, b, alpha=2), (2, 3), (2, 3)),
    "mul": (lambda a, b: a * b, (2, 3), (2, 3)),
    "mul_broadcast": (lambda a, b: a * b, (4, 1, 3), (2, 1)),
    "mul_zero_dim": (lambda a, b: a * b, (2, 3), ()),
    "mul_constant": (lambda a, b: a * b, (2, 3), const(3)),
    "rmul_scalar": (lambda a: 3.0 * a, (2, 3)),
    "div": (lambda a, b: a / b, (2, 3), pos(2, 3)),
    "div_broadcast": (lambda a, b: a / b, (2, 3), pos(3)),
    "rdiv_scalar": (lambda a: 2.0 / a, pos(2, 3)),
    "div_scalar": (lambda a: a / 4.0, (2, 3)),
    "neg": (lambda a: -a, (2, 3)),
    "pow_scalar": (lambda a: a ** 3, (2, 3)),
    "pow_square": (lambda a: a ** 2, (2, 3)),
    "pow_fractional": (lambda a: a ** 1.5, pos(2, 3)),
    "pow_negative": (lambda a: a ** -2, pos(2, 3)),
    "pow_zero_dim": (lambda a: a.pow(3), ()),
    "pow_tensor": (lambda a, b: a ** b, pos(2, 3), (2, 3)),
    "pow_tensor_broadcast": (lambda a, b: a ** b, pos(2, 3), (3,)),
    "rpow_scalar": (lambda a: 2.0 ** a, (2, 3)),
    "square": (lambda a: gl.square(a), (2, 3)),
    "reciprocal": (lambda a: gl.reciprocal(a), pos(2, 3)),
    "remainder": (lambda a: gl.remainder(a, 0.7), pos(2, 3)),
    "remainder_tensor": (lambda a, b: a % b, (2, 3), pos(3)),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])
