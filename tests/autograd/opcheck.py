"""The shared helper behind the one-line op tests: random float64 inputs, then
``gl.autograd.gradcheck`` (first derivatives) and ``gl.autograd.gradgradcheck`` (second) against
central finite differences."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import gradlog as gl


@dataclass(frozen=True)
class Arg:
    """An input spec: a random float64 tensor of ``shape`` drawn uniformly from [low, high)
    (standard normal when no range is given); ``grad=False`` for constants."""

    shape: tuple
    low: float | None = None
    high: float | None = None
    grad: bool = True


def pos(*shape: int) -> Arg:
    """Positive values away from 0 (log, sqrt, division, ...)."""
    return Arg(shape, 0.5, 2.0)


def const(*shape: int) -> Arg:
    return Arg(shape, grad=False)


def make_inputs(specs: tuple, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    out = []
    for spec in specs:
        if not isinstance(spec, Arg):
            spec = Arg(tuple(spec))
        if spec.low is None:
            data = rng.standard_normal(spec.shape)
        else:
            data = rng.uniform(spec.low, spec.high, spec.shape)
        out.append(gl.tensor(data, dtype=gl.float64, requires_grad=spec.grad))
    return tuple(out)


def check_grad(fn: Any, *specs: Any, double: bool = True, seed: int = 0) -> None:
    """Assert ``fn``'s gradients (and, with ``double``, its second derivatives) match finite
    differences for inputs built from ``specs`` (shapes or :class:`Arg`)."""
    inputs = make_inputs(specs, seed)
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    assert any(o.requires_grad for o in outs), "the op recorded no graph"
    assert all(o.dtype == gl.float64 for o in outs), "float64 inputs gave a non-float64 output"
    assert gl.autograd.gradcheck(fn, inputs)
    if double:
        assert gl.autograd.gradgradcheck(fn, inputs)
