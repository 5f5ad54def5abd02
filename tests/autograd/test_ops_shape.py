"""Shape operations: gradients against finite differences (float64)."""

import pytest
from opcheck import check_grad

import gradlog as gl

CASES = {
    "reshape": (lambda a: a.reshape(3, 2) * 2, (2, 3)),
    "reshape_infer": (lambda a: gl.reshape(a, (-1,)), (2, 3)),
    "view": (lambda a: a.view(6), (2, 3)),
    "flatten": (lambda a: a.flatten(), (2, 3, 2)),
    "flatten_range": (lambda a: gl.flatten(a, 1, 2), (2, 3, 2)),
    "flatten_zero_dim": (lambda a: a.flatten(), ()),
    "unflatten": (lambda a: a.unflatten(1, (2, 3)), (2, 6)),
    "permute": (lambda a: a.permute(2, 0, 1), (2, 3, 4)),
    "transpose": (lambda a: a.transpose(0, 1), (2, 3)),
    "transpose_3d": (lambda a: gl.transpose(a, -1, 0), (2, 3, 4)),
    "t": (lambda a: a.t(), (2, 3)),
    "T": (lambda a: a.T, (2, 3)),
    "mT": (lambda a: a.mT, (2, 3, 4)),
    "movedim": (lambda a: gl.movedim(a, 0, 2), (2, 3, 4)),
    "unsqueeze": (lambda a: a.unsqueeze(1), (2, 3)),
    "unsqueeze_negative": (lambda a: gl.unsqueeze(a, -1), (2, 3)),
    "unsqueeze_zero_dim": (lambda a: a.unsqueeze(0), ()),
    "squeeze": (lambda a: a.squeeze(), (2, 1, 3, 1)),
    "squeeze_dim": (lambda a: a.squeeze(1), (2, 1, 3)),
    "expand": (lambda a: a.expand(4, 3) * 1, (1, 3)),
    "expand_new_dims": (lambda a: a.expand(2, 4, 3), (3,)),
    "expand_as": (lambda a, b: a.expand_as(b) * b, (3, 1), (3, 2)),
    "broadcast_to": (lambda a: gl.broadcast_to(a, (2, 3)), (3,)),
    "flip": (lambda a: a.flip(0), (2, 3)),
    "flip_dims": (lambda a: gl.flip(a, (0, 1)), (2, 3)),
    "repeat": (lambda a: a.repeat(2, 3), (2, 3)),
    "repeat_new_dim": (lambda a: a.repeat(2, 1, 2), (2, 3)),
    "tile": (lambda a: gl.tile(a, (2,)), (2, 3)),
    "contiguous_after_transpose": (lambda a: a.t().contiguous(), (2, 3)),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])


def test_view_shares_memory_and_reshape_keeps_values():
    x = gl.arange(6.0)
    v = x.view(2, 3)
    v[0, 0] = 10.0
    assert x[0].item() == 10.0
    assert x.reshape(3, 2).tolist() == [[10.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


def test_view_of_a_transposed_tensor_is_refused_like_pytorch():
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        gl.zeros(2, 3).t().view(6)
