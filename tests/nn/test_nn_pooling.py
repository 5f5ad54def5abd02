"""Max, average and adaptive average pooling: finite-difference gradients (overlapping
windows, padding, dilation, ceil mode), PyTorch's first-maximum rule for ties, indices,
output sizes and errors."""

from __future__ import annotations

import numpy as np
import pytest
from nncheck import check, rand

import gradlog as gl
from gradlog import nn
from gradlog.nn import functional as F

POOLS = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 1, "padding": 1},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": (2, 3), "stride": (1, 2)},
    {"kernel_size": 2, "stride": 2, "ceil_mode": True},
]


@pytest.mark.parametrize("kwargs", POOLS + [{"kernel_size": 2, "dilation": 2, "stride": 1}])
def test_max_pool_gradients_including_double_backward(kwargs):
    # distinct values: finite differences are only meaningful away from ties
    x = gl.tensor(np.random.default_rng(0).permutation(75).reshape(1, 3, 5, 5) / 10.0,
                  dtype=gl.float64, requires_grad=True)
    check(lambda x: F.max_pool2d(x, **kwargs), x, double=True)


@pytest.mark.parametrize("kwargs", POOLS)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_gradients_including_double_backward(kwargs, count_include_pad):
    check(lambda x: F.avg_pool2d(x, count_include_pad=count_include_pad, **kwargs),
          rand(1, 2, 5, 5), double=True)


def test_avg_pool_divisor_override_and_values():
    x = gl.arange(16.0).reshape(1, 1, 4, 4)
    out = F.avg_pool2d(x, 2)
    np.testing.assert_allclose(out.numpy()[0, 0], [[2.5, 4.5], [10.5, 12.5]])
    out = F.avg_pool2d(x, 2, divisor_override=1)
    np.testing.assert_allclose(out.numpy()[0, 0], [[10, 18], [42, 50]])
    # count_include_pad: a corner window of a padded 3x3 kernel covers 4 real values
    out = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False).numpy()
    assert out[0, 0, 0, 0] == pytest.approx((0 + 1 + 4 + 5) / 4)
    out = F.avg_pool2d(x, 3, 1, 1).numpy()
    assert out[0, 0, 0, 0] == pytest.approx((0 + 1 + 4 + 5) / 9)


def test_max_pool_gradient_goes_to_the_first_maximum_of_each_window():
    x = gl.tensor([[[[0.0, 0.0, 1.0, 2.0],
                     [0.0, 0.0, 2.0, 1.0],
                     [5.0, 5.0, 3.0, 3.0],
                     [5.0, 5.0, 3.0, 3.0]]]], requires_grad=True)
    F.max_pool2d(x, 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[1, 0, 0, 1],
                                                         [0, 0, 0, 0],
                                                         [1, 0, 1, 0],
                                                         [0, 0, 0, 0]])


def test_overlapping_windows_accumulate_on_a_shared_maximum():
    x = gl.tensor([[[[0.0, 0.0, 0.0],
                     [0.0, 9.0, 0.0],
                     [0.0, 0.0, 0.0]]]], requires_grad=True)
    F.max_pool2d(x, 2, stride=1).sum().backward()  # all four windows pick the centre
    assert x.grad.numpy()[0, 0, 1, 1] == 4 and x.grad.numpy().sum() == 4


def test_return_indices_are_flat_positions_in_the_input_plane():
    x = gl.tensor([[[[1.0, 3.0, 2.0, 0.0, 7.0],
                     [4.0, 0.0, 9.0, 1.0, 0.0],
                     [0.0, 8.0, 0.0, 6.0, 5.0]]]])
    out, idx = F.max_pool2d(x, 2, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(out.numpy()[0, 0], [[4, 9, 7], [8, 6, 5]])
    np.testing.assert_array_equal(idx.numpy()[0, 0], [[5, 7, 4], [11, 13, 14]])
    assert idx.dtype == gl.int64
    out2, idx2 = nn.MaxPool2d(2, ceil_mode=True, return_indices=True)(x)
    np.testing.assert_array_equal(idx2.numpy(), idx.numpy())


def test_max_pool_propagates_nan_and_keeps_its_gradient():
    x = gl.tensor([[[[1.0, float("nan")], [0.0, 2.0]]]], requires_grad=True)
    out = F.max_pool2d(x, 2)
    assert np.isnan(out.item())
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[0, 1], [0, 0]])


@pytest.mark.parametrize("size, out_shape", [
    (1, (1, 1)), ((3, 4), (3, 4)), ((2, None), (2, 8)), ((5, 3), (5, 3)), ((4, 4), (4, 4)),
])
def test_adaptive_avg_pool_shapes_and_gradients(size, out_shape):
    x = rand(1, 2, 7, 8)
    assert tuple(F.adaptive_avg_pool2d(x, size).shape) == (1, 2) + out_shape
    check(lambda x: F.adaptive_avg_pool2d(x, size), x, double=True)


def test_adaptive_avg_pool_uneven_windows_follow_floor_and_ceil_bounds():
    x = gl.arange(5.0).reshape(1, 1, 1, 5)
    out = F.adaptive_avg_pool2d(x, (1, 3)).numpy()[0, 0, 0]
    # windows [0, 2), [1, 4), [3, 5)
    np.testing.assert_allclose(out, [0.5, 2.0, 3.5])


def test_pooling_keeps_float32_and_accepts_unbatched_input():
    x = gl.randn(3, 6, 6, requires_grad=True)
    for out in (F.max_pool2d(x, 2), F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 3)):
        assert out.shape == (3, 3, 3) and out.dtype == gl.float32


@pytest.mark.parametrize("layer, text", [
    (lambda: nn.MaxPool2d(2), "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, "
                              "ceil_mode=False)"),
    (lambda: nn.MaxPool2d(3, 2, 1, ceil_mode=True),
     "MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True)"),
    (lambda: nn.AvgPool2d(2), "AvgPool2d(kernel_size=2, stride=2, padding=0)"),
    (lambda: nn.AdaptiveAvgPool2d((None, 3)), "AdaptiveAvgPool2d(output_size=(None, 3))"),
])
def test_pool_repr(layer, text):
    assert repr(layer()) == text


def test_pooling_errors_name_the_values():
    with pytest.raises(RuntimeError, match=r"pad should be at most half of effective kernel "
                       r"size, but got pad=2, kernel_size=3 and dilation=1"):
        F.max_pool2d(gl.zeros(1, 1, 4, 4), 3, padding=2)
    with pytest.raises(RuntimeError, match=r"Given input size: \(1x2x2\). Calculated output "
                       r"size: \(1x0x0\). Output size is too small"):
        F.max_pool2d(gl.zeros(1, 1, 2, 2), 3)
    with pytest.raises(RuntimeError, match=r"3D or 4D .* got input of size \[2, 1, 2, 2, 2\]"):
        F.max_pool2d(gl.zeros(2, 1, 2, 2, 2), 2)
    with pytest.raises(RuntimeError, match="stride should not be zero"):
        F.avg_pool2d(gl.zeros(1, 1, 4, 4), 2, stride=0)
    with pytest.raises(RuntimeError, match="divisor must be not zero"):
        F.avg_pool2d(gl.zeros(1, 1, 4, 4), 2, divisor_override=0)
    with pytest.raises(RuntimeError, match="output_size must be 2"):
        F.adaptive_avg_pool2d(gl.zeros(1, 1, 4, 4), (2, 2, 2))
