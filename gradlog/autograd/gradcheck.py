"""Finite-difference gradient checking (float64), public so op and plugin authors use it."""

from __future__ import annotations

from typing import Any

import numpy as np

from .engine import grad as autograd_grad
from .tensor import Tensor, wrap

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]


class GradcheckError(RuntimeError):
    """The analytical and numerical gradients differ."""


def _as_tuple(x: Any) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def _outputs(fn: Any, inputs: tuple) -> tuple:
    return tuple(o for o in _as_tuple(fn(*inputs)) if isinstance(o, Tensor))


def _numerical(fn: Any, inputs: tuple, i: int, out_idx: int, eps: float) -> np.ndarray:
    """d out[out_idx] / d inputs[i] as a (numel_in, numel_out) matrix, central differences."""
    x = inputs[i]._data
    out0 = _outputs(fn, inputs)[out_idx]._data
    jac = np.zeros((x.size, out0.size), dtype=np.float64)
    for k, pos in enumerate(np.ndindex(x.shape)):  # in place, whatever the input's layout
        orig = x[pos]
        x[pos] = orig + eps
        plus = _outputs(fn, inputs)[out_idx]._data.astype(np.float64).reshape(-1)
        x[pos] = orig - eps
        minus = _outputs(fn, inputs)[out_idx]._data.astype(np.float64).reshape(-1)
        x[pos] = orig
        jac[k] = (plus - minus) / (2 * eps)
    return jac


def _analytical(fn: Any, inputs: tuple, diff: list, out_idx: int) -> list:
    out = _outputs(fn, inputs)[out_idx]
    n_out = out._data.size
    jacs = [np.zeros((inputs[i]._data.size, n_out)) for i in diff]
    if not out._requires_grad:
        return jacs
    for j in range(n_out):
        seed = np.zeros(out._data.shape, dtype=out._data.dtype)
        seed.reshape(-1)[j] = 1
        grads = autograd_grad(out, [inputs[i] for i in diff], wrap(seed), retain_graph=True,
                              allow_unused=True)
        for col, g in zip(jacs, grads):
            if g is not None:
                col[:, j] = g._data.astype(np.float64).reshape(-1)
    return jacs


def gradcheck(fn: Any, inputs: Any, *, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """Compare ``fn``'s backward with central finite differences for every input that requires
    grad and every output. Inputs should be float64 (float32 is too coarse for differences).

    Returns True, or raises ``GradcheckError`` naming the input, output and worst element.
    """
    inputs = _as_tuple(inputs)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t._requires_grad]
    for i in diff:
        if inputs[i]._data.dtype != np.float64:
            import warnings
            warnings.warn(f"gradcheck: input {i} is {inputs[i]._data.dtype}, not float64; the "
                          "finite differences may be inaccurate", UserWarning, stacklevel=2)
    n_outputs = len(_outputs(fn, inputs))
    for o in range(n_outputs):
        analytical = _analytical(fn, inputs, diff, o)
        for i, a in zip(diff, analytical):
            n = _numerical(fn, inputs, i, o, eps)
            if not np.allclose(a, n, atol=atol, rtol=rtol, equal_nan=False):
                if not raise_exception:
                    return False
                err = np.abs(a - n)
                k = np.unravel_index(np.argmax(err), err.shape)
                raise GradcheckError(
                    f"Jacobian mismatch for output {o} with respect to input {i}: worst element "
                    f"(input index {k[0]}, output index {k[1]}): analytical {a[k]:.8g}, "
                    f"numerical {n[k]:.8g}\nanalytical:\n{a}\nnumerical:\n{n}")
    return True


def gradgradcheck(fn: Any, inputs: Any, *, eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, seed: int = 0) -> bool:
    """Check second derivatives: gradcheck of ``v . d fn / d inputs`` for a fixed random ``v``
    (built with ``create_graph=True``)."""
    inputs = _as_tuple(inputs)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t._requires_grad]
    outs = _outputs(fn, inputs)
    rng = np.random.default_rng(seed)
    vs = [wrap(rng.standard_normal(o._data.shape)) for o in outs]

    def first_grads(*xs: Tensor) -> tuple:
        pairs = [(o, v) for o, v in zip(_outputs(fn, xs), vs) if o._requires_grad]
        gs = autograd_grad([o for o, _ in pairs], [xs[i] for i in diff], [v for _, v in pairs],
                           create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)

    return gradcheck(first_grads, inputs, eps=eps, atol=atol, rtol=rtol)
