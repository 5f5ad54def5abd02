"""nn.utils: gradient clipping against PyTorch (total norm returned, gradients scaled, dtypes
kept) and the parameter/vector conversions."""

import warnings

import numpy as np
import pytest

import gradlog as gl
from gradlog import nn
from gradlog.nn.utils import (
    clip_grad_norm_,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
    parameters_to_vector,
    vector_to_parameters,
)

torch = pytest.importorskip("torch")

SHAPES = [(5, 4), (4,), (3, 2, 2)]


def pair(dtype=np.float32, scale=1.0, seed=0, none_at=()):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [(rng.standard_normal(s) * scale).astype(dtype) for s in SHAPES]
    ours = [nn.Parameter(gl.tensor(v)) for v in values]
    theirs = [torch.nn.Parameter(torch.tensor(v)) for v in values]
    for i, (a, b, g) in enumerate(zip(ours, theirs, grads)):
        if i not in none_at:
            a.grad, b.grad = gl.tensor(g.copy()), torch.tensor(g.copy())
    return ours, theirs


def assert_grads_equal(ours, theirs, rtol):
    for a, b in zip(ours, theirs):
        if b.grad is None:
            assert a.grad is None
            continue
        assert a.grad.numpy().dtype == b.grad.numpy().dtype
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=rtol, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm_type", [2.0, 1, float("inf"), 0.5, 3])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_pytorch(norm_type, max_norm, dtype):
    ours, theirs = pair(dtype)
    n_ours = clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    n_theirs = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert isinstance(n_ours, gl.Tensor) and n_ours.shape == () and n_ours.dtype == (
        gl.float32 if dtype == np.float32 else gl.float64)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(n_ours.item(), n_theirs.item(), rtol=rtol)
    assert_grads_equal(ours, theirs, rtol)


def test_clipped_total_norm_is_max_norm_and_small_norms_are_untouched():
    ours, _ = pair(scale=10.0)
    before = clip_grad_norm_(ours, 1.0)
    assert before.item() > 10
    after = get_total_norm([p.grad for p in ours])
    assert after.item() == pytest.approx(1.0, rel=1e-5)
    small, _ = pair(scale=1e-3)
    grads = [p.grad.numpy().copy() for p in small]
    clip_grad_norm_(small, 1.0)
    for p, g in zip(small, grads):
        np.testing.assert_array_equal(p.grad.numpy(), g)


def test_none_grads_are_ignored_and_single_tensor_accepted():
    ours, theirs = pair(none_at=(1,))
    n1 = clip_grad_norm_(ours, 0.1)
    n2 = torch.nn.utils.clip_grad_norm_(theirs, 0.1)
    np.testing.assert_allclose(n1.item(), n2.item(), rtol=1e-6)
    assert_grads_equal(ours, theirs, 1e-5)
    ours, theirs = pair()
    np.testing.assert_allclose(clip_grad_norm_(ours[0], 0.1).item(),
                               torch.nn.utils.clip_grad_norm_(theirs[0], 0.1).item(), rtol=1e-6)
    assert_grads_equal(ours[:1], theirs[:1], 1e-5)


def test_no_gradients_gives_zero_norm_and_empty_generator_warns():
    p = nn.Parameter(gl.ones(3))
    assert clip_grad_norm_([p], 1.0).item() == 0.0
    with pytest.warns(UserWarning, match="`parameters` is an empty generator"):
        clip_grad_norm_((q for q in []), 1.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_norm(bad):
    ours, theirs = pair()
    ours[0].grad.numpy()[0, 0] = bad
    theirs[0].grad[0, 0] = bad
    message = ("The total norm of order 2.0 for gradients from `parameters` is non-finite, so "
               "it cannot be clipped. To disable this error and scale the gradients by the "
               "non-finite norm anyway, set `error_if_nonfinite=False`")
    with pytest.raises(RuntimeError) as ours_err:
        clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
    with pytest.raises(RuntimeError) as theirs_err:
        torch.nn.utils.clip_grad_norm_(theirs, 1.0, error_if_nonfinite=True)
    assert str(ours_err.value) == str(theirs_err.value) == message
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n1 = clip_grad_norm_(ours, 1.0)
        n2 = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert str(n1.item()) == str(n2.item())
    assert_grads_equal(ours, theirs, 1e-6)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_clip_grad_norm_does_not_record_a_graph():
    p = nn.Parameter(gl.ones(3))
    (p * p).sum().backward(create_graph=True)
    assert p.grad.requires_grad
    total = clip_grad_norm_([p], 1.0)
    assert total.grad_fn is None


def test_clip_grads_with_precomputed_norm():
    ours, theirs = pair(scale=3.0)
    total = get_total_norm([p.grad for p in ours])
    clip_grads_with_norm_(ours, 2.0, total)
    torch.nn.utils.clip_grad_norm_(theirs, 2.0)
    assert_grads_equal(ours, theirs, 1e-5)


def test_clip_grad_value_matches_pytorch():
    ours, theirs = pair(scale=2.0, none_at=(2,))
    clip_grad_value_(ours, 0.7)
    torch.nn.utils.clip_grad_value_(theirs, 0.7)
    assert_grads_equal(ours, theirs, 0)
    assert max(np.abs(p.grad.numpy()).max() for p in ours[:2]) == pytest.approx(0.7)


def test_parameters_to_vector_and_back():
    ps = [nn.Parameter(gl.arange(6, dtype=gl.float32).reshape(2, 3)),
          nn.Parameter(gl.tensor([10.0, 11.0]))]
    vec = parameters_to_vector(ps)
    assert vec.tolist() == [0, 1, 2, 3, 4, 5, 10, 11]
    (vec * gl.arange(8, dtype=gl.float32)).sum().backward()
    assert ps[1].grad.tolist() == [6.0, 7.0]
    new = gl.arange(8, dtype=gl.float32) * -1
    vector_to_parameters(new, ps)
    assert ps[0].tolist() == [[0, -1, -2], [-3, -4, -5]] and ps[1].tolist() == [-6, -7]
    assert np.shares_memory(ps[1].detach().numpy(), new.numpy())
    with pytest.raises(TypeError, match="expected gradlog.Tensor, but got: list"):
        vector_to_parameters([1.0], ps)
