"""Elementwise math: gradients against finite differences (float64)."""

import pytest
from opcheck import Arg, check_grad, pos

import gradlog as gl

CASES = {
    "exp": (lambda a: a.exp(), (2, 3)),
    "exp_zero_dim": (lambda a: gl.exp(a), ()),
    "expm1": (lambda a: a.expm1(), (2, 3)),
    "log": (lambda a: a.log(), pos(2, 3)),
    "log2": (lambda a: a.log2(), pos(2, 3)),
    "log10": (lambda a: a.log10(), pos(2, 3)),
    "log1p": (lambda a: a.log1p(), pos(2, 3)),
    "sqrt": (lambda a: a.sqrt(), pos(2, 3)),
    "sqrt_zero_dim": (lambda a: gl.sqrt(a), pos()),
    "rsqrt": (lambda a: a.rsqrt(), pos(2, 3)),
    "abs": (lambda a: a.abs(), (2, 3)),
    "sin": (lambda a: a.sin(), (2, 3)),
    "cos": (lambda a: a.cos(), (2, 3)),
    "tan": (lambda a: a.tan(), Arg((2, 3), -1.2, 1.2)),
    "erf": (lambda a: a.erf(), (2, 3)),
    "clamp": (lambda a: a.clamp(-0.5, 0.5), (3, 4)),
    "clamp_min": (lambda a: a.clamp(min=0.1), (3, 4)),
    "clamp_max": (lambda a: gl.clamp(a, max=-0.1), (3, 4)),
    "clamp_tensor_bounds": (lambda a, lo: a.clamp(min=lo), (3, 4), Arg((4,), grad=False)),
    "clip": (lambda a: gl.clip(a, -0.3, 0.3), (3, 4)),
    "frac": (lambda a: a.frac(), Arg((2, 3), 0.1, 0.9)),
    "floor_is_flat": (lambda a: a.floor() + a, Arg((2, 3), 0.1, 0.9)),
    "ceil_is_flat": (lambda a: a.ceil() * a, Arg((2, 3), 0.1, 0.9)),
    "round_is_flat": (lambda a: a.round() + a, Arg((2, 3), 0.1, 0.4)),
    "trunc_is_flat": (lambda a: a.trunc() + a, Arg((2, 3), 0.1, 0.9)),
    "sign_is_flat": (lambda a: a.sign() * a, (2, 3)),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])
