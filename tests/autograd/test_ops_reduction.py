"""Reductions with ``dim`` / ``keepdim``: gradients against finite differences (float64)."""

import pytest
from opcheck import check_grad, pos

import gradlog as gl

CASES = {
    "sum": (lambda a: a.sum(), (2, 3)),
    "sum_dim": (lambda a: a.sum(1), (2, 3)),
    "sum_dim_keepdim": (lambda a: a.sum(0, keepdim=True), (2, 3)),
    "sum_dims": (lambda a: a.sum((0, 2)), (2, 3, 2)),
    "sum_negative_dim": (lambda a: gl.sum(a, -1), (2, 3)),
    "sum_zero_dim": (lambda a: a.sum(), ()),
    "mean": (lambda a: a.mean(), (2, 3)),
    "mean_dim": (lambda a: a.mean(0), (2, 3)),
    "mean_dims_keepdim": (lambda a: a.mean((1, 2), keepdim=True), (2, 3, 2)),
    "max_all": (lambda a: a.max(), (2, 3)),
    "max_dim": (lambda a: a.max(1).values, (2, 3)),
    "max_dim_keepdim": (lambda a: a.max(0, keepdim=True)[0], (2, 3)),
    "min_all": (lambda a: gl.min(a), (2, 3)),
    "min_dim": (lambda a: a.min(-1).values, (2, 3)),
    "amax": (lambda a: a.amax(1), (2, 3)),
    "amax_dims_keepdim": (lambda a: gl.amax(a, (0, 1), keepdim=True), (2, 3, 2)),
    "amin": (lambda a: a.amin(0), (2, 3)),
    "var": (lambda a: a.var(), (2, 3)),
    "var_dim": (lambda a: a.var(1), (2, 3)),
    "var_biased_keepdim": (lambda a: a.var(0, keepdim=True, correction=0), (3, 2)),
    "std": (lambda a: a.std(), (2, 3)),
    "std_dim_unbiased_false": (lambda a: gl.std(a, 1, unbiased=False), (2, 3)),
    "norm": (lambda a: a.norm(), (2, 3)),
    "norm_dim": (lambda a: a.norm(dim=1), (2, 3)),
    "norm_p1": (lambda a: a.norm(p=1), (2, 3)),
    "norm_p3_keepdim": (lambda a: a.norm(p=3, dim=0, keepdim=True), (2, 3)),
    "norm_inf": (lambda a: a.norm(p=float("inf")), (2, 3)),
    "prod": (lambda a: a.prod(), (2, 3)),
    "prod_dim": (lambda a: a.prod(1), (2, 3)),
    "prod_dim_keepdim": (lambda a: a.prod(0, keepdim=True), (2, 3)),
    "logsumexp": (lambda a: a.logsumexp(1), (2, 3)),
    "logsumexp_keepdim": (lambda a: gl.logsumexp(a, (0, 1), keepdim=True), (2, 3)),
    "cumsum": (lambda a: a.cumsum(1), (2, 3)),
    "cumsum_first": (lambda a: gl.cumsum(a, 0), (3, 2)),
    "mean_of_positive_log": (lambda a: a.log().mean(1), pos(2, 3)),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])


def test_prod_gradient_is_exact_with_a_zero():
    x = gl.tensor([2.0, 0.0, 3.0], dtype=gl.float64, requires_grad=True)
    x.prod().backward()
    assert x.grad.tolist() == [0.0, 6.0, 0.0]


def test_amax_shares_the_gradient_among_ties_and_max_dim_gives_it_to_one():
    x = gl.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
    x.amax(1).sum().backward()
    assert x.grad.tolist() == [[0.0, 0.5, 0.5]]
    y = gl.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
    y.max(1).values.sum().backward()
    assert y.grad.tolist() == [[0.0, 1.0, 0.0]]


def test_norm_gradient_is_zero_not_nan_at_the_origin():
    x = gl.zeros(3, requires_grad=True)
    x.norm().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]
