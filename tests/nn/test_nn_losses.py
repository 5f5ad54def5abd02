"""Losses: finite-difference gradients for every option (class weights, ignore_index, label
smoothing, probability targets, K-dim inputs, reductions), numerical stability at logits of
1e4, the single fused cross-entropy node, and errors that name the values."""

from __future__ import annotations

import numpy as np
import pytest
from nncheck import check, rand

import gradlog as gl
from gradlog import nn
from gradlog.nn import functional as F

TARGET = gl.tensor([2, 0, 3, 3, -100, 1])
WEIGHT = gl.tensor([0.5, 2.0, 1.0, 3.0], dtype=gl.float64)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kwargs", [
    {}, {"weight": WEIGHT}, {"label_smoothing": 0.2},
    {"weight": WEIGHT, "label_smoothing": 0.3, "ignore_index": 3},
])
def test_cross_entropy_with_class_indices_gradients(reduction, kwargs):
    target = TARGET if kwargs.get("ignore_index", -100) == -100 else \
        gl.tensor([2, 0, 3, 3, 1, 1])
    check(lambda x: F.cross_entropy(x, target, reduction=reduction, **kwargs), rand(6, 4),
          double=True)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_with_probability_targets_gradients(reduction):
    q = gl.tensor(np.random.default_rng(3).dirichlet(np.ones(4), 5), requires_grad=True)
    check(lambda x, q: F.cross_entropy(x, q, WEIGHT, reduction=reduction,
                                       label_smoothing=0.1), rand(5, 4), q, double=True)


def test_cross_entropy_over_spatial_dimensions_and_single_samples():
    target = gl.tensor(np.random.default_rng(0).integers(0, 3, (2, 2, 3)))
    check(lambda x: F.cross_entropy(x, target, reduction="none"), rand(2, 3, 2, 3))
    check(lambda x: F.cross_entropy(x, gl.tensor(1)), rand(4))


def test_cross_entropy_values_match_the_definition():
    x = rand(6, 4, grad=False).numpy()
    t = TARGET.numpy()
    logp = x - np.log(np.exp(x).sum(1, keepdims=True))
    keep = t != -100
    w = WEIGHT.numpy()[np.where(keep, t, 0)] * keep
    nll = -logp[np.arange(6), np.where(keep, t, 0)] * w
    smooth = -(logp * WEIGHT.numpy()).sum(1) * keep
    expected = (0.9 * nll.sum() + 0.1 / 4 * smooth.sum()) / w.sum()
    got = F.cross_entropy(gl.tensor(x), TARGET, WEIGHT, label_smoothing=0.1).item()
    assert got == pytest.approx(expected, rel=1e-12)


def test_cross_entropy_is_a_single_node_on_float32():
    x = gl.randn(8, 5, requires_grad=True)
    loss = nn.CrossEntropyLoss()(x, gl.randint(0, 5, (8,)))
    assert loss.grad_fn.name() == "CrossEntropyLossBackward0"
    assert loss.grad_fn.next_functions[0][0] is not None
    assert loss.grad_fn.next_functions[0][0].name() == "torch::autograd::AccumulateGrad"
    loss.backward()
    assert loss.dtype == gl.float32 and x.grad.dtype == gl.float32


def test_cross_entropy_gradient_is_softmax_minus_one_hot_over_n():
    x = gl.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], requires_grad=True)
    F.cross_entropy(x, gl.tensor([2, 0])).backward()
    p = np.exp(x.detach().numpy())
    p /= p.sum(1, keepdims=True)
    p[[0, 1], [2, 0]] -= 1
    np.testing.assert_allclose(x.grad.numpy(), p / 2, rtol=1e-6)


def test_huge_logits_do_not_overflow():
    x = gl.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 3.0]], requires_grad=True)
    loss = F.cross_entropy(x, gl.tensor([1, 1]), label_smoothing=0.1)
    loss.backward()
    assert np.isfinite(loss.item()) and np.isfinite(x.grad.numpy()).all()
    assert loss.item() == pytest.approx((0.9 * 2e4 + 0.1 / 3 * (3e4 + 3e4 - 3)) / 2,
                                        rel=1e-6)
    z = gl.tensor([1e4, -1e4, 0.0], requires_grad=True)
    bce = F.binary_cross_entropy_with_logits(z, gl.tensor([0.0, 1.0, 0.5]), reduction="none")
    np.testing.assert_allclose(bce.detach().numpy(), [1e4, 1e4, np.log(2)], rtol=1e-6)
    bce.sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [1, -1, 0], atol=1e-6)


def test_all_targets_ignored_gives_nan_loss_and_zero_gradient():
    x = gl.zeros(3, 4, requires_grad=True)
    loss = F.cross_entropy(x, gl.tensor([-100, -100, -100]))
    loss.backward()
    assert np.isnan(loss.item()) and (x.grad.numpy() == 0).all()
    assert F.cross_entropy(gl.zeros(3, 4), gl.tensor([-100] * 3), reduction="sum").item() == 0


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_gradients(reduction):
    check(lambda x: F.nll_loss(x, TARGET, WEIGHT, reduction=reduction), rand(6, 4),
          double=True)


def test_nll_of_log_softmax_equals_cross_entropy():
    x = rand(6, 4, grad=False)
    a = F.nll_loss(F.log_softmax(x, 1), TARGET, WEIGHT).item()
    assert a == pytest.approx(F.cross_entropy(x, TARGET, WEIGHT).item(), rel=1e-12)


@pytest.mark.parametrize("fn", [F.mse_loss, F.l1_loss])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_loss_gradients(fn, reduction):
    check(lambda x, y: fn(x, y, reduction=reduction), rand(3, 4), rand(3, 4, seed=1),
          double=fn is F.mse_loss)


def test_weighted_mse_mean_divides_by_the_weight_sum():
    x, y, w = gl.tensor([1.0, 2.0]), gl.tensor([0.0, 0.0]), gl.tensor([1.0, 3.0])
    assert F.mse_loss(x, y, weight=w).item() == pytest.approx((1 + 12) / 4)


def test_binary_cross_entropy_gradients():
    p = rand(3, 4, low=0.05, high=0.95)
    y = rand(3, 4, seed=1, low=0.0, high=1.0)
    w = rand(3, 4, seed=2, grad=False)
    check(lambda p, y: F.binary_cross_entropy(p, y, w), p, y, double=True)
    check(lambda x, y: F.binary_cross_entropy_with_logits(
        x, y, w, pos_weight=gl.tensor([1.0, 2.0, 0.5, 3.0], dtype=gl.float64)),
        rand(3, 4), y, double=True)


def test_binary_cross_entropy_clamps_log_at_minus_100():
    p = gl.tensor([0.0, 1.0], requires_grad=True)
    loss = F.binary_cross_entropy(p, gl.tensor([1.0, 0.0]))
    assert loss.item() == pytest.approx(100.0)
    loss.backward()
    np.testing.assert_allclose(p.grad.numpy(), [-5e11, 5e11], rtol=1e-5)


def test_loss_module_buffers_and_repr():
    ce = nn.CrossEntropyLoss(weight=gl.ones(3), label_smoothing=0.1)
    assert repr(ce) == "CrossEntropyLoss()" and list(ce.state_dict()) == ["weight"]
    assert list(nn.BCEWithLogitsLoss(pos_weight=gl.ones(2)).state_dict()) == ["pos_weight"]
    assert list(nn.CrossEntropyLoss().state_dict()) == []
    assert nn.MSELoss(reduction="sum").reduction == "sum"


def test_loss_errors_name_the_values():
    with pytest.raises(IndexError, match=r"Target 5 is out of bounds: class indices must be in "
                       r"\[0, 4\) for input of shape \(8, 4\)"):
        F.cross_entropy(gl.zeros(8, 4), gl.full((8,), 5))
    with pytest.raises(IndexError, match="Target -3 is out of bounds"):
        F.nll_loss(gl.zeros(8, 4), gl.full((8,), -3))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(8\) to match target "
                       r"batch_size \(7\)"):
        F.cross_entropy(gl.zeros(8, 4), gl.full((7,), 1))
    with pytest.raises(RuntimeError, match="Expected floating point type for target with class "
                       "probabilities, got Long"):
        F.cross_entropy(gl.zeros(8, 4), gl.zeros(8, 4, dtype=gl.int64))
    with pytest.raises(RuntimeError, match=r"class-index targets must be integers"):
        F.cross_entropy(gl.zeros(8, 4), gl.zeros(8))
    with pytest.raises(RuntimeError, match=r"Expected target size \[8, 3\], got \[8, 4\]"):
        F.cross_entropy(gl.zeros(8, 4, 3), gl.zeros(8, 4, dtype=gl.int64))
    with pytest.raises(RuntimeError, match=r"weight tensor should be defined either for all 4 "
                       r"classes or no classes but got weight tensor of shape: \[3\]"):
        F.cross_entropy(gl.zeros(8, 4), gl.full((8,), 1), gl.ones(3))
    with pytest.raises(RuntimeError, match="label_smoothing must be between 0.0 and 1.0. Got: "
                       "1.5"):
        F.cross_entropy(gl.zeros(8, 4), gl.full((8,), 1), label_smoothing=1.5)
    with pytest.raises(ValueError, match="foo is not a valid value for reduction"):
        nn.CrossEntropyLoss(reduction="foo")(gl.zeros(2, 3), gl.zeros(2, dtype=gl.int64))
    with pytest.raises(ValueError, match=r"Target size \(gradlog.Size\(\[4\]\)\) must be the "
                       r"same as input size \(gradlog.Size\(\[4, 1\]\)\)"):
        F.binary_cross_entropy_with_logits(gl.zeros(4, 1), gl.zeros(4))
    with pytest.raises(RuntimeError, match=r"all elements of input should be between 0 and 1 "
                       r"\(found 2.0\)"):
        F.binary_cross_entropy(gl.full((4,), 2.0), gl.zeros(4))


def test_mse_warns_when_shapes_broadcast():
    with pytest.warns(UserWarning, match="that is different to the input size"):
        F.mse_loss(gl.zeros(4, 1), gl.zeros(4))
