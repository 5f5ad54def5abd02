"""Indexing (basic and advanced) with gradient, and index assignment."""

import numpy as np
import pytest
from opcheck import check_grad, const

import gradlog as gl

IDX = gl.tensor([2, 0, 2, 1])
MASK = gl.tensor([[True, False, True], [False, False, True]])

CASES = {
    "int": (lambda a: a[1], (3, 4)),
    "negative_int": (lambda a: a[-1, 2], (3, 4)),
    "slice": (lambda a: a[1:, ::2], (3, 4)),
    "ellipsis_none": (lambda a: a[..., None, 1], (2, 3, 4)),
    "zero_dim_result": (lambda a: a[1, 2] * a[0, 0], (3, 4)),
    "int_tensor": (lambda a: a[IDX], (3, 2)),
    "repeated_indices_accumulate": (lambda a: a[[0, 0, 1, 0]], (3,)),
    "int_list_second_dim": (lambda a: a[:, [1, 1, 0]], (2, 3)),
    "two_int_arrays": (lambda a: a[[0, 1, 1], [2, 0, 2]], (2, 3)),
    "bool_mask": (lambda a: a[MASK], (2, 3)),
    "bool_row_mask": (lambda a: a[gl.tensor([True, False, True])], (3, 2)),
    "gather": (lambda a: a.gather(1, gl.tensor([[0, 0], [2, 1]])), (2, 3)),
    "index_select": (lambda a: gl.index_select(a, 1, gl.tensor([2, 0, 2])), (2, 3)),
    "masked_select": (lambda a: a.masked_select(gl.tensor([True, False, True])), (2, 3)),
    "take": (lambda a: gl.take(a, gl.tensor([5, 0, 5])), (2, 3)),
    "setitem_mask_keeps_others": (lambda a: _assigned(a, MASK, 0.0), (2, 3)),
    "setitem_values": (lambda a, v: _assigned(a, (slice(None), 1), v), (2, 3), (2,)),
    "setitem_into_constant": (lambda c, v: _assigned(c, [0, 2], v), const(3, 2), (2,)),
}


def _assigned(t, index, value):
    out = t * 1.0  # a non-leaf, so in-place assignment is allowed
    out[index] = value
    return out


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])


def test_repeated_indices_accumulate_into_grad():
    x = gl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x[[0, 0, 2, 0]].sum().backward()
    assert x.grad.tolist() == [3.0, 0.0, 1.0]


def test_masked_assignment_zeroes_the_gradient_at_the_mask():
    x = gl.tensor([-1.0, 2.0, -3.0], requires_grad=True)
    y = x * 2
    y[y < 0] = 0
    assert y.tolist() == [0.0, 4.0, 0.0]
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 2.0, 0.0]


def test_index_out_of_range_raises_index_error():
    with pytest.raises(IndexError):
        gl.zeros(2, 3)[2]
    with pytest.raises(IndexError):
        gl.zeros(2, 3)[gl.tensor([0, 3])]


def test_float_index_is_refused():
    with pytest.raises(IndexError, match="tensors used as indices must be long"):
        gl.zeros(3)[gl.tensor([0.0])]


def test_basic_index_is_a_view_and_advanced_index_a_copy():
    x = gl.zeros(2, 3)
    x[0][1] = 5.0
    x[[1]][0, 0] = 7.0
    assert np.array_equal(x.numpy(), [[0, 5, 0], [0, 0, 0]])
