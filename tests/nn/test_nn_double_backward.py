"""The backward of every layer is itself differentiable in all its arguments, the upstream
gradient included (what gradient penalties and Hessian-vector products need): finite
differences of ``(inputs, v) -> vjp``."""

from __future__ import annotations

import pytest
from nncheck import check_vjp, rand

import gradlog as gl
from gradlog.nn import functional as F

T = gl.tensor([2, 0, 1, 1])
W = gl.tensor([0.5, 2.0, 1.0], dtype=gl.float64)


@pytest.mark.parametrize("name, fn, shapes", [
    ("conv", lambda x, w: F.conv2d(x, w, stride=2, padding=1), [(1, 2, 4, 4), (2, 2, 3, 3)]),
    ("conv_groups", lambda x, w: F.conv2d(x, w, groups=2, dilation=2),
     [(1, 2, 5, 5), (2, 1, 2, 2)]),
    ("avg_pool", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), [(1, 1, 5, 5)]),
    ("adaptive", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), [(1, 1, 5, 4)]),
    ("batch_norm", lambda x: F.batch_norm(x, None, None, training=True), [(3, 2, 2)]),
    ("layer_norm", lambda x: F.layer_norm(x, (3,)), [(2, 3)]),
    ("ce_mean", lambda x: F.cross_entropy(x, T, W, label_smoothing=0.2), [(4, 3)]),
    ("ce_none", lambda x: F.cross_entropy(x, T, reduction="none"), [(4, 3)]),
    ("ce_sum_ignore", lambda x: F.cross_entropy(x, T, reduction="sum", ignore_index=0),
     [(4, 3)]),
    ("nll", lambda x: F.nll_loss(x, T, W), [(4, 3)]),
    ("interpolate", lambda x: F.interpolate(x, size=(3, 4), mode="bilinear"), [(1, 1, 2, 3)]),
    ("pad", lambda x: F.pad(x, (1, -1)), [(2, 3)]),
])
def test_backward_is_differentiable_in_every_argument(name, fn, shapes):
    check_vjp(fn, *(rand(*s, seed=i) for i, s in enumerate(shapes)))


def test_max_pool_backward_is_differentiable():
    import numpy as np
    x = gl.tensor(np.random.default_rng(0).permutation(25).reshape(1, 1, 5, 5) / 10.0,
                  dtype=gl.float64, requires_grad=True)
    check_vjp(lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), x)


def test_embedding_and_dropout_backward_are_differentiable():
    idx = gl.tensor([[0, 2], [2, 2]])
    check_vjp(lambda w: F.embedding(idx, w), rand(3, 2))

    def drop(x):
        gl.manual_seed(1)
        return F.dropout(x, 0.5)
    check_vjp(drop, rand(3, 4))
