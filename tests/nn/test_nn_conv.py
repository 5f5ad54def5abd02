"""Conv2d / Conv1d: finite-difference gradients for every argument combination, the layer's
defaults and repr, and errors that name the offending values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from nncheck import check, rand

import gradlog as gl
from gradlog import nn
from gradlog.nn import functional as F


@pytest.mark.parametrize("kwargs", [
    {},
    {"padding": 1},
    {"stride": 2, "padding": 1},
    {"stride": (2, 1), "padding": (0, 2)},
    {"dilation": 2, "padding": 1},
    {"padding": "same"},
    {"padding": "same", "dilation": (1, 2)},
    {"padding": "valid"},
])
def test_conv2d_gradients_match_finite_differences(kwargs):
    x, w, b = rand(1, 2, 5, 5), rand(3, 2, 3, 2, seed=1), rand(3, seed=2)
    check(lambda x, w, b: F.conv2d(x, w, b, **kwargs), x, w, b)


def test_grouped_conv2d_gradients_including_double_backward():
    x, w = rand(1, 4, 4, 4), rand(6, 2, 2, 2, seed=1)
    check(lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=2), x, w, double=True)


def test_conv2d_double_backward_without_bias():
    x, w = rand(1, 2, 4, 4), rand(2, 2, 3, 3, seed=1)
    check(lambda x, w: F.conv2d(x, w, padding=1, dilation=1), x, w, double=True)


def test_unbatched_conv2d_and_conv1d_gradients():
    check(lambda x, w: F.conv2d(x, w, padding=1), rand(2, 4, 4), rand(3, 2, 3, 3, seed=1))
    check(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2),
          rand(2, 2, 7), rand(3, 2, 3, seed=1), rand(3, seed=2))


def test_conv2d_values_against_a_direct_loop():
    x, w, b = rand(2, 3, 6, 5, grad=False), rand(4, 3, 3, 2, seed=1, grad=False), rand(4)
    out = F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2)).detach().numpy()
    xp = np.pad(x.numpy(), ((0, 0), (0, 0), (1, 1), (0, 0)))
    ref = np.zeros(out.shape)
    for oh in range(out.shape[2]):
        for ow in range(out.shape[3]):
            patch = xp[:, :, oh * 2:oh * 2 + 3, ow:ow + 3:2]  # dilation 2 along W
            ref[:, :, oh, ow] = np.einsum("nchw,ochw->no", patch, w.numpy())
    ref += b.detach().numpy()[:, None, None]
    np.testing.assert_allclose(out, ref, rtol=1e-12)


def test_weight_gradient_is_right_when_backward_runs_twice():
    x, w = rand(2, 2, 5, 5), rand(3, 2, 3, 3, seed=1)
    out = F.conv2d(x, w, padding=1).sum()
    first = gl.autograd.grad(out, w, retain_graph=True)[0].numpy()
    second = gl.autograd.grad(out, w)[0].numpy()  # the cached patches were released: rebuilt
    np.testing.assert_array_equal(first, second)


def test_conv_keeps_float32():
    conv = nn.Conv2d(3, 4, 3, padding=1)
    x = gl.randn(2, 3, 5, 5, requires_grad=True)
    y = conv(x)
    y.sum().backward()
    assert y.dtype == gl.float32
    assert x.grad.dtype == gl.float32 and conv.weight.grad.dtype == gl.float32


def test_conv2d_default_init_is_kaiming_uniform_with_a_sqrt5():
    gl.manual_seed(0)
    conv = nn.Conv2d(16, 64, 3)
    bound = 1 / math.sqrt(16 * 9)
    w, b = conv.weight.detach().numpy(), conv.bias.detach().numpy()
    assert w.shape == (64, 16, 3, 3) and b.shape == (64,)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert np.abs(b).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound  # uniform(-a, a) std = a/sqrt(3)


@pytest.mark.parametrize("layer, text", [
    (lambda: nn.Conv2d(3, 16, 3, padding=1),
     "Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))"),
    (lambda: nn.Conv2d(3, 16, 3, padding="same", bias=False),
     "Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=same, bias=False)"),
    (lambda: nn.Conv2d(4, 8, (3, 5), stride=2, padding=(1, 2), dilation=2, groups=2),
     "Conv2d(4, 8, kernel_size=(3, 5), stride=(2, 2), padding=(1, 2), dilation=(2, 2), "
     "groups=2)"),
    (lambda: nn.Conv1d(3, 4, 3), "Conv1d(3, 4, kernel_size=(3,), stride=(1,))"),
])
def test_conv_repr(layer, text):
    assert repr(layer()) == text


def test_wrong_channel_count_names_weight_and_input_sizes():
    conv = nn.Conv2d(3, 16, 3)
    with pytest.raises(RuntimeError, match=r"Given groups=1, weight of size \[16, 3, 3, 3\], "
                       r"expected input\[8, 1, 28, 28\] to have 3 channels, but got 1 "
                       r"channels instead"):
        conv(gl.zeros(8, 1, 28, 28))


def test_wrong_rank_and_too_small_input_are_rejected():
    conv = nn.Conv2d(3, 16, 3)
    with pytest.raises(RuntimeError, match=r"Expected 3D \(unbatched\) or 4D \(batched\) input "
                       r"to conv2d, but got input of size: \[8, 3, 28, 28, 1\]"):
        conv(gl.zeros(8, 3, 28, 28, 1))
    with pytest.raises(RuntimeError, match=r"padded input size per channel: \(2 x 2\). Kernel "
                       r"size: \(3 x 3\)"):
        conv(gl.zeros(1, 3, 2, 2))
    with pytest.raises(RuntimeError, match=r"Expected 2D \(unbatched\) or 3D"):
        nn.Conv1d(3, 4, 3)(gl.zeros(2, 3, 4, 5))


@pytest.mark.parametrize("make, error, message", [
    (lambda: nn.Conv2d(3, 16, 3, groups=2), ValueError, "in_channels must be divisible"),
    (lambda: nn.Conv2d(4, 15, 3, groups=2), ValueError, "out_channels must be divisible"),
    (lambda: nn.Conv2d(3, 16, 3, padding="foo"), ValueError, "Invalid padding string 'foo'"),
    (lambda: nn.Conv2d(3, 16, 3, stride=2, padding="same"), ValueError,
     "padding='same' is not supported for strided convolutions"),
    (lambda: nn.Conv2d(3, 16, 3, padding_mode="reflect"), NotImplementedError, "reflect"),
])
def test_bad_constructor_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_functional_argument_errors():
    x, w = gl.zeros(1, 3, 5, 5), gl.zeros(2, 3, 3, 3)
    with pytest.raises(RuntimeError, match=r"expected bias to be 1-dimensional with 2 elements, "
                       r"but got bias of size \[3\]"):
        F.conv2d(x, w, gl.zeros(3))
    with pytest.raises(RuntimeError, match="non-positive stride"):
        F.conv2d(x, w, stride=0)
    with pytest.raises(RuntimeError, match="negative padding"):
        F.conv2d(x, w, padding=-1)
    with pytest.raises(RuntimeError, match="expected scalar type Double but found Float"):
        F.conv2d(x.double(), w)
    with pytest.raises(RuntimeError, match="Given groups=3, weight of size"):
        F.conv2d(gl.zeros(1, 4, 5, 5), gl.zeros(6, 2, 3, 3), groups=3)
