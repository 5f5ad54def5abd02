"""nn.init: gains, fans, the distributions' bounds and spreads, reproducibility through the
default generator and ``generator=``, and use on leaf parameters (under no_grad)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradlog as gl
from gradlog import nn
from gradlog.nn import init


@pytest.mark.parametrize("name, param, gain", [
    ("linear", None, 1), ("conv2d", None, 1), ("sigmoid", None, 1), ("tanh", None, 5 / 3),
    ("relu", None, math.sqrt(2)), ("leaky_relu", None, math.sqrt(2 / (1 + 0.01 ** 2))),
    ("leaky_relu", 0.2, math.sqrt(2 / 1.04)), ("selu", None, 0.75),
])
def test_calculate_gain(name, param, gain):
    assert init.calculate_gain(name, param) == pytest.approx(gain)


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity foo"):
        init.calculate_gain("foo")
    with pytest.raises(ValueError, match="negative_slope x not a valid number"):
        init.calculate_gain("leaky_relu", "x")


def test_fans_include_the_receptive_field():
    assert init._calculate_fan_in_and_fan_out(gl.empty(16, 3, 5, 5)) == (75, 400)
    assert init._calculate_fan_in_and_fan_out(gl.empty(10, 20)) == (20, 10)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(gl.empty(5))
    with pytest.raises(ValueError, match=r"Mode fan_x not supported, please use one of "
                       r"\['fan_in', 'fan_out'\]"):
        init.kaiming_uniform_(gl.empty(3, 3), mode="fan_x")


def test_distribution_bounds_and_spreads():
    w = nn.Parameter(gl.empty(400, 300))
    gl.manual_seed(0)
    a = init.kaiming_uniform_(w, nonlinearity="relu").detach().numpy()
    bound = math.sqrt(2) * math.sqrt(3 / 300)
    assert np.abs(a).max() <= bound and np.abs(a).max() > 0.99 * bound
    b = init.kaiming_normal_(w, mode="fan_out").detach().numpy()
    assert b.std() == pytest.approx(math.sqrt(2 / (1 + 0)) / math.sqrt(400), rel=0.02)
    c = init.xavier_uniform_(w, gain=2.0).detach().numpy()
    assert np.abs(c).max() <= 2 * math.sqrt(6 / 700)
    d = init.xavier_normal_(w).detach().numpy()
    assert d.std() == pytest.approx(math.sqrt(2 / 700), rel=0.02)
    e = init.trunc_normal_(w, mean=1.0, std=2.0, a=0.0, b=2.0).detach().numpy()
    assert e.min() >= 0 and e.max() <= 2 and abs(e.mean() - 1) < 0.01
    f = init.normal_(w, 3.0, 0.5).detach().numpy()
    assert f.mean() == pytest.approx(3.0, abs=0.01) and f.std() == pytest.approx(0.5, rel=0.02)
    g = init.uniform_(w, -1.0, 2.0).detach().numpy()
    assert g.min() >= -1 and g.max() < 2 and w.dtype == gl.float32


def test_constant_fills_and_return_value():
    w = nn.Parameter(gl.empty(2, 3))
    assert init.zeros_(w) is w and (w.detach().numpy() == 0).all()
    assert (init.ones_(w).detach().numpy() == 1).all()
    assert (init.constant_(w, 0.25).detach().numpy() == 0.25).all()
    assert w.requires_grad and w.grad_fn is None and w._version == 3


def test_seeded_and_generator_draws_are_reproducible():
    w = gl.empty(5, 5)
    gl.manual_seed(11)
    first = init.kaiming_uniform_(w).clone()
    gl.manual_seed(11)
    assert gl.equal(init.kaiming_uniform_(w), first)
    g1, g2 = gl.Generator().manual_seed(3), gl.Generator().manual_seed(3)
    assert gl.equal(init.normal_(w, generator=g1).clone(), init.normal_(w, generator=g2))


def test_zero_element_tensor_warns_and_is_left_alone():
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        init.kaiming_uniform_(gl.empty(0, 3))


def test_init_writes_through_the_tensors_in_place_ops_with_their_checks():
    """As PyTorch's init (fill_ / copy_ under no_grad): an inference tensor is refused outside
    inference mode, a value an integer tensor cannot hold is a RuntimeError, and the draws
    land in the tensor's own memory (a view's base sees them)."""
    torch = pytest.importorskip("torch")
    with gl.inference_mode():
        frozen = gl.zeros(2)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
        init.ones_(frozen)
    with pytest.raises(RuntimeError):
        torch.nn.init.constant_(torch.zeros(2, dtype=torch.int64), float("nan"))
    with pytest.raises(RuntimeError):
        init.constant_(gl.zeros(2, dtype=gl.int64), float("nan"))
    base = gl.zeros(4, 3)
    init.uniform_(base[1:3], -1.0, 1.0)
    drawn = base.numpy()[1:3]
    assert (base.numpy()[[0, 3]] == 0).all() and (drawn != 0).all()
    assert ((drawn >= -1) & (drawn < 1)).all() and base._version == 1
