"""BatchNorm1d/2d and LayerNorm: gradients (first and second order), running statistics
(momentum, cumulative average, unbiased variance, num_batches_tracked), eval mode,
the affine/tracking switches, repr and input checks."""

from __future__ import annotations

import numpy as np
import pytest
from nncheck import check, rand

import gradlog as gl
from gradlog import nn
from gradlog.nn import functional as F


def test_batch_norm_training_gradients_including_double_backward():
    x, w, b = rand(3, 2, 2, 2), rand(2, seed=1), rand(2, seed=2)
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b,
          double=True)


def test_batch_norm_eval_gradients():
    rm, rv = gl.tensor([0.5, -1.0], dtype=gl.float64), gl.tensor([2.0, 0.5], dtype=gl.float64)
    check(lambda x, w, b: F.batch_norm(x, rm, rv, w, b), rand(3, 2, 4), rand(2, seed=1),
          rand(2, seed=2), double=True)


def test_layer_norm_gradients_including_double_backward():
    check(lambda x, w, b: F.layer_norm(x, (2, 3), w, b, eps=1e-3), rand(2, 2, 3),
          rand(2, 3, seed=1), rand(2, 3, seed=2), double=True)
    check(lambda x: F.layer_norm(x, 4), rand(3, 4), double=True)


def test_training_output_is_standardized_per_channel():
    bn = nn.BatchNorm2d(3)
    x = gl.randn(8, 3, 4, 4) * 5 + 2
    y = bn(x).detach().numpy()
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(y.var(axis=(0, 2, 3)), 1, atol=1e-3)


def test_running_statistics_follow_momentum_with_unbiased_variance():
    bn = nn.BatchNorm1d(2, momentum=0.3)
    xs = [np.random.default_rng(i).normal(i, 1 + i, (5, 2)).astype(np.float32) for i in range(3)]
    mean, var = np.zeros(2), np.ones(2)
    for a in xs:
        bn(gl.tensor(a))
        mean = 0.7 * mean + 0.3 * a.mean(0)
        var = 0.7 * var + 0.3 * a.var(0, ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-5)
    assert bn.num_batches_tracked.item() == 3 and bn.num_batches_tracked.dtype == gl.int64


def test_momentum_none_averages_all_batches_equally():
    bn = nn.BatchNorm1d(1, momentum=None)
    for value in (1.0, 2.0, 6.0):
        bn(gl.tensor([[value], [value + 2]]))
    assert bn.running_mean.item() == pytest.approx((2 + 3 + 7) / 3)


def test_eval_mode_uses_running_statistics_and_does_not_update_them():
    bn = nn.BatchNorm2d(2)
    with gl.no_grad():
        bn.running_mean.copy_(gl.tensor([1.0, -1.0]))
        bn.running_var.copy_(gl.tensor([4.0, 0.25]))
        bn.weight.fill_(2.0)
        bn.bias.fill_(0.5)
    bn.eval()
    x = gl.randn(3, 2, 2, 2)
    y = bn(x).detach().numpy()
    expected = ((x.numpy() - np.array([1, -1])[:, None, None]) /
                np.sqrt(np.array([4, 0.25])[:, None, None] + 1e-5)) * 2 + 0.5
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert bn.num_batches_tracked.item() == 0
    np.testing.assert_array_equal(bn.running_mean.numpy(), [1, -1])


def test_without_tracking_batch_statistics_are_used_in_eval_too():
    bn = nn.BatchNorm1d(2, track_running_stats=False, affine=False).eval()
    assert bn.running_mean is None and list(bn.state_dict()) == []
    y = bn(gl.tensor([[1.0, 10.0], [3.0, 30.0]])).numpy()
    np.testing.assert_allclose(y, [[-1, -1], [1, 1]], atol=1e-4)


def test_state_dict_keys_and_defaults():
    assert list(nn.BatchNorm2d(4).state_dict()) == [
        "weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert list(nn.BatchNorm2d(4, bias=False).state_dict()) == [
        "weight", "running_mean", "running_var", "num_batches_tracked"]
    ln = nn.LayerNorm([2, 3])
    assert ln.weight.shape == (2, 3) and (ln.weight.detach().numpy() == 1).all()
    assert (ln.bias.detach().numpy() == 0).all()
    assert list(nn.LayerNorm(3, elementwise_affine=False).state_dict()) == []


def test_norm_layers_keep_float32():
    x = gl.randn(4, 3, 2, 2, requires_grad=True)
    for layer in (nn.BatchNorm2d(3), nn.LayerNorm((2, 2))):
        y = layer(x)
        y.sum().backward()
        assert y.dtype == gl.float32 and x.grad.dtype == gl.float32
    assert nn.BatchNorm2d(3).running_var.dtype == gl.float32


@pytest.mark.parametrize("layer, text", [
    (lambda: nn.BatchNorm2d(16), "BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, "
                                 "bias=True, track_running_stats=True)"),
    (lambda: nn.BatchNorm1d(5, momentum=None, affine=False, track_running_stats=False),
     "BatchNorm1d(5, eps=1e-05, momentum=None, affine=False, bias=False, "
     "track_running_stats=False)"),
    (lambda: nn.LayerNorm(10), "LayerNorm((10,), eps=1e-05, elementwise_affine=True, "
                               "bias=True)"),
])
def test_norm_repr(layer, text):
    assert repr(layer()) == text


def test_bad_inputs_name_the_values():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input"):
        nn.BatchNorm2d(3)(gl.zeros(8, 3, 28))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input"):
        nn.BatchNorm1d(3)(gl.zeros(8, 3, 2, 2))
    with pytest.raises(RuntimeError, match="running_mean should contain 4 elements not 3"):
        nn.BatchNorm2d(3)(gl.zeros(8, 4, 2, 2))
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when "
                       r"training, got input size gradlog.Size\(\[1, 3\]\)"):
        nn.BatchNorm1d(3)(gl.zeros(1, 3))
    with pytest.raises(RuntimeError, match="running_mean must be defined in evaluation mode"):
        F.batch_norm(gl.zeros(4, 3), None, None)
    with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[4\], expected input with "
                       r"shape \[\*, 4\], but got input of size\[2, 3\]"):
        nn.LayerNorm(4)(gl.zeros(2, 3))
    with pytest.raises(RuntimeError, match=r"weight of shape \[4\] and normalized_shape = "
                       r"\[3\]"):
        F.layer_norm(gl.zeros(2, 3), (3,), gl.zeros(4))
