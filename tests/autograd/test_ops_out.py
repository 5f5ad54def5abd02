"""``out=``: the values written equal the function's own (float64 against numpy), and a
tensor written through ``out=`` is an ordinary leaf afterwards, cut from the graph of the
values it was computed from (``out=`` never records, as in PyTorch): a graph using it
differentiates as if it were a constant (float64, against the analytical gradients)."""

import numpy as np
import pytest

import gradlog as gl

rng = np.random.default_rng(0)
A, B = rng.uniform(0.5, 2.0, (3, 4)), rng.uniform(0.5, 2.0, (3, 4))

CASES = {
    "add": (lambda a, b, out: gl.add(a, b, alpha=0.5, out=out), A + 0.5 * B),
    "sub": (lambda a, b, out: gl.sub(a, b, out=out), A - B),
    "mul": (lambda a, b, out: gl.mul(a, b, out=out), A * B),
    "div": (lambda a, b, out: gl.div(a, b, out=out), A / B),
    "pow": (lambda a, b, out: gl.pow(a, b, out=out), A ** B),
    "remainder": (lambda a, b, out: gl.remainder(a, b, out=out), np.remainder(A, B)),
    "matmul": (lambda a, b, out: gl.matmul(a, b.t(), out=out), A @ B.T),
}


@pytest.mark.parametrize("name", CASES)
def test_out_writes_the_functions_values(name):
    fn, expected = CASES[name]
    out = gl.empty(0, dtype=gl.float64)
    result = fn(gl.tensor(A), gl.tensor(B), out)
    assert result is out and out._version == 1
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)


def test_a_tensor_written_through_out_is_a_leaf_with_gradients():
    def fn(x):
        w = gl.zeros(3, 4, dtype=gl.float64)
        with gl.no_grad():
            gl.mul(x, 2.0, out=w)  # (no graph: out= never records)
        w.requires_grad_()
        return (x * w).sin(), w

    x = gl.tensor(A, requires_grad=True)
    y, w = fn(x)
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.cos(A * 2 * A) * A, rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), np.cos(A * 2 * A) * 2 * A, rtol=1e-12)
