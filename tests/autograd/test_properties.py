"""Property tests over random shapes for the elementwise and reduction families: forward values
against numpy, gradients against finite differences, and exact gradients where they are known.
"""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gradlog as gl

SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3)
SEEDS = st.integers(0, 2**32 - 1)


def _tensor(shape, seed, low=None, high=None):
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)
    return gl.tensor(data, dtype=gl.float64, requires_grad=True)


BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / (b * b + 0.5), lambda a, b: a / (b * b + 0.5)),
    "pow": (lambda a, b: (a * a + 0.5) ** b, lambda a, b: (a * a + 0.5) ** b),
    "maximum": (gl.maximum, np.maximum),
    "minimum": (gl.minimum, np.minimum),
    "where": (lambda a, b: gl.where(a > b, a, b * 2), lambda a, b: np.where(a > b, a, b * 2)),
}


@pytest.mark.parametrize("name", BINARY)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
       seed=SEEDS)
def test_broadcasting_binary_ops(name, shapes, seed):
    op, reference = BINARY[name]
    sa, sb = shapes.input_shapes
    a, b = _tensor(sa, seed), _tensor(sb, seed + 1)
    out = op(a, b)
    assert out.shape == shapes.result_shape
    np.testing.assert_allclose(out.detach().numpy(), reference(a.detach().numpy(),
                                                               b.detach().numpy()), rtol=1e-12)
    assert gl.autograd.gradcheck(op, (a, b))


UNARY = {
    "exp": (gl.exp, np.exp, None),
    "log": (gl.log, np.log, (0.2, 3.0)),
    "sqrt": (gl.sqrt, np.sqrt, (0.2, 3.0)),
    "sin": (gl.sin, np.sin, None),
    "tanh": (gl.tanh, np.tanh, None),
    "sigmoid": (gl.sigmoid, lambda x: 1 / (1 + np.exp(-x)), None),
    "abs": (gl.abs, np.abs, None),
    "relu": (gl.relu, lambda x: np.maximum(x, 0), None),
    "clamp": (lambda x: x.clamp(-0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), None),
    "softplus": (gl.softplus, lambda x: np.log1p(np.exp(x)), None),
    "gelu": (gl.gelu, None, None),
    "pow3": (lambda x: x ** 3, lambda x: x ** 3, None),
}


KINKS = {"abs": (0.0,), "relu": (0.0,), "clamp": (-0.5, 0.7)}


@pytest.mark.parametrize("name", UNARY)
@given(shape=SHAPES, seed=SEEDS)
def test_elementwise_unary_ops(name, shape, seed):
    op, reference, domain = UNARY[name]
    x = _tensor(shape, seed, *(domain or ()))
    # finite differences across a kink measure neither side's derivative
    assume(all(np.abs(x.detach().numpy() - k).min() > 1e-4 for k in KINKS.get(name, ())))
    out = op(x)
    assert out.shape == x.shape and out.dtype == gl.float64
    if reference is not None:
        np.testing.assert_allclose(out.detach().numpy(), reference(x.detach().numpy()),
                                   rtol=1e-12, atol=1e-15)
    assert gl.autograd.gradcheck(op, (x,))


REDUCTIONS = {
    "sum": (lambda x, d, k: x.sum(d, keepdim=k), lambda a, d, k: a.sum(d, keepdims=k)),
    "mean": (lambda x, d, k: x.mean(d, keepdim=k), lambda a, d, k: a.mean(d, keepdims=k)),
    "amax": (lambda x, d, k: x.amax(d, keepdim=k), lambda a, d, k: a.max(d, keepdims=k)),
    "amin": (lambda x, d, k: x.amin(d, keepdim=k), lambda a, d, k: a.min(d, keepdims=k)),
    "var": (lambda x, d, k: x.var(d, keepdim=k, correction=0),
            lambda a, d, k: a.var(d, keepdims=k)),
    "std": (lambda x, d, k: x.std(d, keepdim=k, correction=0),
            lambda a, d, k: a.std(d, keepdims=k)),
    "norm": (lambda x, d, k: x.norm(dim=d, keepdim=k),
             lambda a, d, k: np.sqrt((a * a).sum(d, keepdims=k))),
    "logsumexp": (lambda x, d, k: x.logsumexp(d, keepdim=k),
                  lambda a, d, k: np.log(np.exp(a).sum(d, keepdims=k))),
}


@st.composite
def shape_and_dims(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3))
    dims = draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1,
                         max_size=len(shape), unique_by=lambda d: d % len(shape)))
    return shape, tuple(dims), draw(st.booleans())


@pytest.mark.parametrize("name", REDUCTIONS)
@given(case=shape_and_dims(), seed=SEEDS)
def test_reductions_over_dims(name, case, seed):
    shape, dims, keepdim = case
    op, reference = REDUCTIONS[name]
    x = _tensor(shape, seed)
    if name in ("var", "std") and all(shape[d] == 1 for d in dims):
        return  # a variance over one element has no useful derivative
    out = op(x, dims, keepdim)
    expected = reference(x.detach().numpy(), tuple(d % len(shape) for d in dims), keepdim)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-10)
    assert gl.autograd.gradcheck(lambda t: op(t, dims, keepdim), (x,))


@given(shape=SHAPES, seed=SEEDS)
def test_sum_and_mean_gradients_are_exact(shape, seed):
    x = _tensor(shape, seed)
    x.sum().backward()
    assert np.array_equal(x.grad.numpy(), np.ones(shape))
    x.grad = None
    x.mean().backward()
    assert np.allclose(x.grad.numpy(), np.full(shape, 1 / max(x.numel(), 1)), rtol=1e-15)


@given(case=shape_and_dims(), seed=SEEDS)
def test_softmax_is_a_distribution_and_log_softmax_its_log(case, seed):
    shape, dims, _ = case
    x = _tensor(shape, seed)
    d = dims[0]
    p = x.softmax(d)
    np.testing.assert_allclose(p.sum(d).detach().numpy(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(x.log_softmax(d).exp().detach().numpy(), p.detach().numpy(),
                               rtol=1e-12)
    assert gl.autograd.gradcheck(lambda t: t.softmax(d), (x,))


@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
       seed=SEEDS)
def test_float32_broadcast_gradients_keep_their_shape_and_dtype(shapes, seed):
    sa, sb = shapes.input_shapes
    a = gl.tensor(np.random.default_rng(seed).standard_normal(sa), dtype=gl.float32,
                  requires_grad=True)
    b = gl.tensor(np.random.default_rng(seed + 1).standard_normal(sb), dtype=gl.float32,
                  requires_grad=True)
    (a * b + a / (b * b + 1) - 0.5).sum().backward()
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    assert a.grad.dtype == gl.float32 and b.grad.dtype == gl.float32
