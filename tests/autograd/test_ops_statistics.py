"""Statistics and cumulative ops (var_mean, std_mean, median, nanmedian, nansum, nanmean,
cumprod, logcumsumexp, softmin): gradients against finite differences (float64), and the
values that finite differences cannot check (NaN handling, ties, zeros)."""

import numpy as np
import pytest
from opcheck import check_grad

import gradlog as gl
from gradlog.nn import functional as F


def _both(pair):
    var, mean = pair
    return var * 2 + mean


CASES = {
    "var_mean": (lambda a: _both(gl.var_mean(a)), (3, 4)),
    "var_mean_dim_keepdim": (lambda a: _both(gl.var_mean(a, 1, keepdim=True)), (3, 4)),
    "var_mean_biased_dims": (lambda a: _both(gl.var_mean(a, (0, 2), correction=0)), (2, 3, 2)),
    "var_mean_only_var": (lambda a: gl.var_mean(a, 0)[0], (3, 4)),
    "std_mean": (lambda a: _both(gl.std_mean(a, 1)), (3, 4)),
    "std_mean_only_mean": (lambda a: a.std_mean(0)[1], (3, 4)),
    "median": (lambda a: a.median(), (3, 4)),
    "median_dim": (lambda a: a.median(1).values, (3, 4)),
    "median_dim_keepdim": (lambda a: gl.median(a, 0, keepdim=True)[0], (4, 3)),
    "nanmedian_dim": (lambda a: a.nanmedian(1).values, (3, 4)),
    "nansum_dim": (lambda a: a.nansum(1), (3, 4)),
    "nanmean": (lambda a: gl.nanmean(a, 0, keepdim=True), (3, 4)),
    "cumprod": (lambda a: a.cumprod(1), (3, 4)),
    "cumprod_with_zeros": (lambda a: a.where(a.abs() > 0.3, 0.0).cumprod(0), (4, 3)),
    "logcumsumexp": (lambda a: a.logcumsumexp(1), (3, 4)),
    "softmin": (lambda a: F.softmin(a, 1), (3, 4)),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])


def test_var_mean_is_one_node_with_two_outputs():
    x = gl.randn(3, 4, requires_grad=True)
    var, mean = gl.var_mean(x, 1)
    assert var.grad_fn is mean.grad_fn and var.grad_fn.name() == "VarMeanBackward0"
    np.testing.assert_allclose(var.detach().numpy(), x.detach().numpy().var(1, ddof=1),
                               rtol=1e-6)
    np.testing.assert_allclose(mean.detach().numpy(), x.detach().numpy().mean(1), rtol=1e-6)


def test_median_is_the_lower_median_and_shares_the_gradient_among_ties():
    x = gl.tensor([1.0, 3.0, 3.0, 2.0], requires_grad=True)
    m = x.median()
    assert m.item() == 2.0
    m.backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0, 1.0]
    y = gl.tensor([3.0, 1.0, 3.0], requires_grad=True)
    y.median().backward()
    assert y.grad.tolist() == [0.5, 0.0, 0.5]


def test_median_propagates_nan_and_nanmedian_ignores_it():
    nan = float("nan")
    x = gl.tensor([[1.0, nan, 3.0], [2.0, 5.0, 4.0]], requires_grad=True)
    values, indices = x.median(1)
    assert np.isnan(values[0].item()) and values[1].item() == 4.0
    assert indices.tolist() == [1, 2]
    values, indices = x.nanmedian(1)
    assert values.tolist() == [1.0, 4.0] and indices.tolist() == [0, 2]
    values.sum().backward()
    assert x.grad.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]


def test_nansum_and_nanmean_skip_nan_elements_and_give_them_no_gradient():
    x = gl.tensor([1.0, float("nan"), 3.0], requires_grad=True)
    assert x.nansum().item() == 4.0
    mean = x.nanmean()
    assert mean.item() == 2.0
    mean.backward()
    assert x.grad.tolist() == [0.5, 0.0, 0.5]
    with pytest.raises(RuntimeError, match="nanmean\\(\\): expected input to have floating"):
        gl.tensor([1, 2]).nanmean()


def test_cumprod_gradient_is_exact_with_zeros():
    x = gl.tensor([2.0, 0.0, 3.0, 0.5], dtype=gl.float64, requires_grad=True)
    x.cumprod(0).sum().backward()
    assert x.grad.tolist() == [1.0, 11.0, 0.0, 0.0]  # PyTorch's values (tests/parity)
