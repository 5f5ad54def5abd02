"""``repr`` of tensors: PyTorch's format, checked here on strings PyTorch printed (the parity
suite compares a larger table live)."""

import pytest

import gradlog as gl

CASES = [
    (lambda: gl.tensor([2.0, 4.0, 6.0]), "tensor([2., 4., 6.])"),
    (lambda: gl.tensor([1, 2], dtype=gl.int32), "tensor([1, 2], dtype=gradlog.int32)"),
    (lambda: gl.tensor([[1.5, -2.25], [1e-5, 3.0]]),
     "tensor([[ 1.5000e+00, -2.2500e+00],\n        [ 1.0000e-05,  3.0000e+00]])"),
    (lambda: gl.arange(1500.0),
     "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.4970e+03, 1.4980e+03,\n"
     "        1.4990e+03])"),
    (lambda: gl.tensor([], dtype=gl.int64), "tensor([], dtype=gradlog.int64)"),
    (lambda: gl.zeros(2, 0), "tensor([], size=(2, 0))"),
    (lambda: (gl.tensor(2.0, requires_grad=True) ** 3 * 1.5),
     "tensor(12., grad_fn=<MulBackward0>)"),
    (lambda: gl.tensor([1.0], requires_grad=True), "tensor([1.], requires_grad=True)"),
    (lambda: gl.arange(7.0, dtype=gl.float64, requires_grad=True) * 1.25,
     "tensor([0.0000, 1.2500, 2.5000, 3.7500, 5.0000, 6.2500, 7.5000],\n"
     "       dtype=gradlog.float64, grad_fn=<MulBackward0>)"),
    (lambda: gl.tensor([float("nan"), 1.0, float("-inf")]), "tensor([nan, 1., -inf])"),
    (lambda: gl.Size([2, 3]), "gradlog.Size([2, 3])"),
]


@pytest.mark.parametrize("make, expected", CASES)
def test_repr_is_pytorchs(make, expected):
    assert repr(make()) == expected
