"""pad, interpolate, normalize and one_hot: values, gradients and errors."""

from __future__ import annotations

import numpy as np
import pytest
from nncheck import check, rand

import gradlog as gl
from gradlog.nn import functional as F


def test_pad_values_crop_and_gradients():
    x = gl.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(F.pad(x, (1, 0), value=-1).numpy(),
                                  [[-1, 0, 1, 2], [-1, 3, 4, 5]])
    np.testing.assert_array_equal(F.pad(x, (0, 0, 1, 1)).numpy()[[0, 3]], 0)
    np.testing.assert_array_equal(F.pad(x, (-1, 1)).numpy(), [[1, 2, 0], [4, 5, 0]])
    check(lambda x: F.pad(x, (1, 2, -1, 1), value=3.0), rand(2, 3, 4), double=True)


def test_pad_errors():
    with pytest.raises(RuntimeError, match="Padding length must be divisible by 2"):
        F.pad(gl.zeros(2, 3), (1,))
    with pytest.raises(RuntimeError, match="padding length 6 and input of dimension 2"):
        F.pad(gl.zeros(2, 3), (1, 1, 1, 1, 1, 1))
    with pytest.raises(NotImplementedError, match="mode 'reflect'"):
        F.pad(gl.zeros(2, 3), (1, 1), mode="reflect")


@pytest.mark.parametrize("kwargs", [
    {"size": (7, 9), "mode": "bilinear"},
    {"scale_factor": 2, "mode": "bilinear", "align_corners": True},
    {"size": (3, 2), "mode": "bilinear", "align_corners": False},
    {"scale_factor": (1.5, 2.5), "mode": "nearest"},
    {"size": 6, "mode": "nearest"},
])
def test_interpolate_gradients(kwargs):
    check(lambda x: F.interpolate(x, **kwargs), rand(1, 2, 3, 4), double=True)


def test_bilinear_upsampling_values():
    x = gl.tensor([[[[0.0, 1.0], [2.0, 3.0]]]])
    corners = F.interpolate(x, size=(3, 3), mode="bilinear", align_corners=True).numpy()
    np.testing.assert_allclose(corners[0, 0], [[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]])
    half = F.interpolate(x, scale_factor=2, mode="bilinear").numpy()[0, 0]
    np.testing.assert_allclose(half[0], [0, 0.25, 0.75, 1])
    nearest = F.interpolate(x, scale_factor=2).numpy()[0, 0]
    np.testing.assert_array_equal(nearest[:, 0], [0, 0, 2, 2])
    assert F.interpolate(x, size=(5, 5), mode="bilinear").dtype == gl.float32


def test_interpolate_errors():
    x = gl.zeros(1, 1, 2, 2)
    with pytest.raises(ValueError, match="either size or scale_factor should be defined"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="only one of size or scale_factor should be defined"):
        F.interpolate(x, size=(4, 4), scale_factor=2)
    with pytest.raises(NotImplementedError, match="Got 3D input, but bilinear mode needs 4D"):
        F.interpolate(gl.zeros(1, 1, 2), size=3, mode="bilinear")
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        F.interpolate(x, size=3, align_corners=True)
    with pytest.raises(ValueError, match=r"output size of \(4, 4, 4\)"):
        F.interpolate(x, size=(4, 4, 4))


def test_normalize_gives_unit_rows_and_gradients():
    y = F.normalize(gl.tensor([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(y.numpy(), [[0.6, 0.8], [0, 0]])
    check(lambda x: F.normalize(x, p=2.0, dim=1), rand(3, 4), double=True)
    check(lambda x: F.normalize(x, p=1.0, dim=0), rand(3, 4))


def test_one_hot_values_and_errors():
    out = F.one_hot(gl.tensor([0, 2, 1]))
    assert out.dtype == gl.int64 and out.tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
    assert F.one_hot(gl.tensor([[1]]), 4).shape == (1, 1, 4)
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        F.one_hot(gl.tensor([3]), 3)
    with pytest.raises(RuntimeError, match="Class values must be non-negative"):
        F.one_hot(gl.tensor([-1]), 3)
    with pytest.raises(RuntimeError, match="only applicable to index tensor of type LongTensor"):
        F.one_hot(gl.tensor([1.0]), 3)
