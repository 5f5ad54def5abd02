"""dtype rules: Python floats give float32 and ints int64, promotion by category, and float32
staying float32 through every op, its gradient and its second derivative."""

import numpy as np
import pytest

import gradlog as gl
from gradlog.autograd.ops.linalg import linear


def test_factory_dtypes():
    assert gl.tensor(1.5).dtype == gl.float32
    assert gl.tensor([1, 2]).dtype == gl.int64
    assert gl.tensor([True]).dtype == gl.bool
    assert gl.tensor([1, 2.5]).dtype == gl.float32
    assert gl.Tensor([5]).dtype == gl.float32 and gl.Tensor([5]).tolist() == [5.0]
    assert gl.tensor(np.zeros(2)).dtype == gl.float64  # numpy arrays keep their dtype
    assert gl.zeros(2).dtype == gl.float32 and gl.arange(3).dtype == gl.int64
    assert gl.full((2,), 3).dtype == gl.int64 and gl.arange(0, 1, 0.5).dtype == gl.float32


def test_default_dtype_can_be_float64():
    gl.set_default_dtype(gl.float64)
    try:
        assert gl.tensor(1.5).dtype == gl.float64 and gl.zeros(1).dtype == gl.float64
        assert (gl.tensor([1, 2]) / 2).dtype == gl.float64
    finally:
        gl.set_default_dtype(gl.float32)
    assert gl.tensor(1.5).dtype == gl.float32


@pytest.mark.parametrize("a, b, expected", [
    (gl.tensor([1, 2]), 2.5, gl.float32),
    (gl.tensor([1, 2]), gl.tensor(2.5, dtype=gl.float64), gl.float64),
    (gl.tensor([1.0, 2.0]), gl.tensor(2.5, dtype=gl.float64), gl.float32),
    (gl.tensor([1.0, 2.0]), gl.tensor([2.5], dtype=gl.float64), gl.float64),
    (gl.tensor([1, 2]), gl.tensor([1.0]), gl.float32),
    (gl.tensor([True]), 3, gl.int64),
    (gl.tensor([1, 2], dtype=gl.int32), 3, gl.int32),
    (gl.tensor([1, 2], dtype=gl.int32), gl.tensor(3), gl.int32),
    (gl.tensor([1.0], dtype=gl.float16), np.float64(2.0), gl.float16),
])
def test_promotion_by_category(a, b, expected):
    assert (a * b).dtype == expected and (b * a).dtype == expected


FLOAT32_PROGRAMS = {
    "arithmetic_with_scalars": lambda x: (x * 2.5 + 1 - 0.5 / (x * x + 1)) ** 2,
    "numpy_scalars": lambda x: (x * np.float64(2.0) + np.float32(1.0) - np.float64(3)
                                / (x ** np.float64(2) + 1) + np.float64(1.5) ** x
                                - np.float64(2) * x / np.float64(3)),
    "rpow_and_pow_tensor": lambda x: 2.0 ** x + x.abs() ** x,
    "unary": lambda x: x.exp() + x.sin() * x.cos() + (x * x + 1).log() + (x * x + 1).sqrt(),
    "more_unary": lambda x: x.tanh() + x.erf() + x.expm1() + (x * x + 1).rsqrt() + x.clamp(-1, 1),
    "activations": lambda x: (gl.gelu(x) + gl.silu(x) + gl.softplus(x) + gl.elu(x)
                              + gl.logsigmoid(x) + x.sigmoid() + gl.leaky_relu(x) + x.relu()),
    "gelu_tanh": lambda x: gl.gelu(x, approximate="tanh"),
    "softmax": lambda x: x.softmax(-1) * x.log_softmax(0),
    "reductions": lambda x: (x.sum(0) + x.mean(0) + x.var(0) + x.std(0) + x.norm(dim=0)
                             + x.amax(0) + x.prod(0) + x.logsumexp(0) + x.max(0).values),
    "norms": lambda x: x.norm(p=1) + x.norm(p=3) + x.norm(),
    "shape_and_join": lambda x: gl.cat([x.t().reshape(-1), x[0], x[:, 1]]).flip(0).cumsum(0),
    "indexing": lambda x: x[[0, 1, 0]] * x.gather(1, gl.tensor([[0], [1]])).sum(),
    "matmul": lambda x: x @ x.t() + linear(x, x, x[0]),
    "where_maximum": lambda x: gl.where(x > 0, x, x * 0.1) + gl.maximum(x, 0.5),
    "sort_topk": lambda x: x.sort(1).values + x.topk(2).values,
}


@pytest.mark.parametrize("name", FLOAT32_PROGRAMS)
def test_float32_stays_float32_through_forward_backward_and_double_backward(name):
    x = gl.tensor([[0.3, -1.2], [0.8, 0.5]], requires_grad=True)
    intermediates = []
    out = FLOAT32_PROGRAMS[name](x)
    assert out.dtype == gl.float32
    out.register_hook(lambda g: intermediates.append(g.dtype))
    (g,) = gl.autograd.grad((out * out).sum(), x, create_graph=True)  # nonlinear in x
    assert g.dtype == gl.float32 and intermediates == [gl.float32]
    (g * g).sum().backward()
    assert x.grad.dtype == gl.float32
