"""Helpers shared by the nn tests: seeded float64 inputs and one-line gradient checks
(``gl.autograd.gradcheck`` / ``gradgradcheck`` against central finite differences)."""

from __future__ import annotations

from typing import Any

import numpy as np

import gradlog as gl


def rand(*shape: int, seed: int = 0, low: float | None = None, high: float | None = None,
         grad: bool = True) -> gl.Tensor:
    """A float64 tensor: standard normal, or uniform in [low, high)."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)
    return gl.tensor(data, dtype=gl.float64, requires_grad=grad)


def check(fn: Any, *inputs: gl.Tensor, double: bool = False) -> None:
    """Assert ``fn``'s first (and with ``double`` second) derivatives match finite
    differences for every input that requires grad."""
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    assert any(o.requires_grad for o in outs if isinstance(o, gl.Tensor)), "no graph recorded"
    assert gl.autograd.gradcheck(fn, inputs)
    if double:
        assert gl.autograd.gradgradcheck(fn, inputs)


def check_vjp(fn: Any, *inputs: gl.Tensor, seed: int = 5) -> None:
    """Assert the backward itself is differentiable in every argument, including the upstream
    gradient ``v``: gradcheck of ``(inputs, v) -> grad(fn(inputs), inputs, v)``."""
    out = fn(*inputs)
    v = gl.tensor(np.random.default_rng(seed).standard_normal(tuple(out.shape)),
                  dtype=gl.float64, requires_grad=True)
    diff = [t for t in inputs if t.requires_grad]

    def vjp(*args: gl.Tensor) -> tuple:
        *xs, v = args
        grads = gl.autograd.grad(fn(*xs), [x for x in xs if x.requires_grad], v,
                                 create_graph=True)
        return tuple(grads)

    assert diff, "no input requires grad"
    assert gl.autograd.gradcheck(vjp, (*inputs, v))
