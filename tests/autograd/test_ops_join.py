"""Joining and splitting: gradients against finite differences (float64)."""

import pytest
from opcheck import check_grad

import gradlog as gl

CASES = {
    "cat": (lambda a, b: gl.cat([a, b]), (2, 3), (1, 3)),
    "cat_dim1": (lambda a, b: gl.cat((a, b), dim=1), (2, 3), (2, 2)),
    "cat_negative_dim": (lambda a, b, c: gl.cat([a, b, c], -1), (2, 1), (2, 2), (2, 3)),
    "concat": (lambda a, b: gl.concat([a, b]), (2,), (3,)),
    "stack": (lambda a, b: gl.stack([a, b]), (2, 3), (2, 3)),
    "stack_last": (lambda a, b: gl.stack([a, b], dim=-1), (2, 3), (2, 3)),
    "stack_zero_dim": (lambda a, b: gl.stack([a, b]), (), ()),
    "hstack": (lambda a, b: gl.hstack([a, b]), (2, 3), (2, 1)),
    "vstack": (lambda a, b: gl.vstack([a, b]), (3,), (2, 3)),
    "split": (lambda a: a.split(2, dim=1), (2, 5)),
    "split_sizes": (lambda a: gl.split(a, [1, 3], 0), (4, 2)),
    "chunk": (lambda a: a.chunk(3), (5, 2)),
    "unbind": (lambda a: a.unbind(1), (2, 3)),
    "narrow": (lambda a: a.narrow(1, 1, 2), (2, 4)),
    "select": (lambda a: a.select(0, 1), (3, 2)),
    "select_negative": (lambda a: gl.select(a, 1, -1), (3, 2)),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])


def test_cat_with_a_constant_gives_gradient_only_to_the_input_that_needs_it():
    a = gl.ones(2, requires_grad=True)
    b = gl.zeros(3)
    (gl.cat([a, b]) * gl.arange(5.0)).sum().backward()
    assert a.grad.tolist() == [0.0, 1.0]
    assert b.grad is None
