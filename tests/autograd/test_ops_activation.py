"""Activations: gradients (and second derivatives) against finite differences (float64)."""

import pytest
from opcheck import check_grad

import gradlog as gl

CASES = {
    "relu": (lambda a: a.relu(), (3, 4)),
    "leaky_relu": (lambda a: gl.leaky_relu(a, 0.2), (3, 4)),
    "hardtanh": (lambda a: gl.hardtanh(a, -0.5, 0.5), (3, 4)),
    "relu6": (lambda a: gl.relu6(a * 4), (3, 4)),
    "sigmoid": (lambda a: a.sigmoid(), (3, 4)),
    "tanh": (lambda a: a.tanh(), (3, 4)),
    "gelu": (lambda a: gl.gelu(a), (3, 4)),
    "gelu_tanh": (lambda a: gl.gelu(a, approximate="tanh"), (3, 4)),
    "softplus": (lambda a: gl.softplus(a), (3, 4)),
    "softplus_beta_threshold": (lambda a: gl.softplus(a * 3, beta=2.0, threshold=2.0), (3, 4)),
    "elu": (lambda a: gl.elu(a, alpha=0.7), (3, 4)),
    "silu": (lambda a: gl.silu(a), (3, 4)),
    "logsigmoid": (lambda a: gl.logsigmoid(a), (3, 4)),
    "softmax_last": (lambda a: a.softmax(-1), (3, 4)),
    "softmax_first": (lambda a: gl.softmax(a, 0), (3, 4)),
    "softmax_3d": (lambda a: a.softmax(1), (2, 3, 2)),
    "log_softmax_last": (lambda a: a.log_softmax(-1), (3, 4)),
    "log_softmax_first": (lambda a: gl.log_softmax(a, dim=0), (3, 4)),
    "sigmoid_zero_dim": (lambda a: a.sigmoid(), ()),
}


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name):
    check_grad(*CASES[name])
