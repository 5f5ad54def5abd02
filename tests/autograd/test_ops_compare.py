"""Comparisons and selection: values, dtypes, and the gradients of where/maximum/sort/..."""

import pytest
from opcheck import check_grad

import gradlog as gl

COND = gl.tensor([[True, False, True], [False, True, False]])

CASES = {
    "where": (lambda a, b: gl.where(COND, a, b), (2, 3), (2, 3)),
    "where_broadcast": (lambda a, b: gl.where(COND, a, b), (3,), (2, 1)),
    "where_scalar_other": (lambda a: gl.where(COND, a, 0.0), (2, 3)),
    "where_method": (lambda a, b: a.where(COND, b), (2, 3), ()),
    "maximum": (lambda a, b: gl.maximum(a, b), (2, 3), (2, 3)),
    "maximum_broadcast": (lambda a, b: a.maximum(b), (2, 3), (3,)),
    "minimum": (lambda a, b: gl.minimum(a, b), (2, 3), (2, 3)),
    "max_binary": (lambda a, b: gl.max(a, b), (2, 3), (2, 3)),
    "masked_fill": (lambda a: a.masked_fill(COND, 2.0), (2, 3)),
    "sort": (lambda a: a.sort(1).values, (2, 3)),
    "sort_descending": (lambda a: gl.sort(a, 0, descending=True)[0], (3, 2)),
    "topk": (lambda a: a.topk(2).values, (2, 4)),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])


def test_comparisons_give_bool_tensors():
    a, b = gl.tensor([1.0, 2.0, 3.0]), gl.tensor([3.0, 2.0, 1.0])
    assert (a < b).tolist() == [True, False, False]
    assert (a <= b).tolist() == [True, True, False]
    assert (a == b).tolist() == [False, True, False]
    assert (a != 2).tolist() == [True, False, True]
    assert gl.ge(a, 2).tolist() == [False, True, True]
    assert (a > b).dtype == gl.bool


def test_isnan_isinf_isfinite_and_any_all():
    x = gl.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    assert gl.isnan(x).tolist() == [False, True, False, False]
    assert x.isinf().tolist() == [False, False, True, True]
    assert gl.isfinite(x).tolist() == [True, False, False, False]
    assert gl.isnan(x).any().item() is True
    assert gl.isfinite(x).all().item() is False
    assert gl.isnan(gl.tensor([1, 2])).tolist() == [False, False]


def test_maximum_splits_the_gradient_of_a_tie():
    a = gl.tensor([1.0, 2.0], requires_grad=True)
    b = gl.tensor([1.0, 0.0], requires_grad=True)
    gl.maximum(a, b).sum().backward()
    assert a.grad.tolist() == [0.5, 1.0]
    assert b.grad.tolist() == [0.5, 0.0]


def test_where_requires_a_bool_condition():
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean tensor"):
        gl.where(gl.tensor([1, 0]), gl.zeros(2), gl.ones(2))
