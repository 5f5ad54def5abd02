"""Copies of a gradlog model watched by a run (copy.deepcopy, pickle) are unwatched: the run's
hooks turn inert in them, training a copy logs nothing, and the original keeps logging."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import gradlog as gl
from gradlog import nn
from gradlog.testing import MemoryWriter
from gradlog.utils.run_hooks import InertHook, RunHook

PLUGINS = ["histogram:every=1", "grad-norm:every=1"]


def _model():
    gl.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def _hooks(model):
    """The hook functions on ``model``'s modules and parameters (out of their records)."""
    found = [getattr(h, "fn", h) for m in model.modules() for registry in
             (m._forward_pre_hooks, m._forward_hooks, m._backward_hooks, m._backward_pre_hooks)
             for h in registry.values()]
    return found + [h for p in model.parameters() for h in (p._post_hooks or {}).values()]


def _step(model, opt, x, y):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_of_a_watched_gradlog_model_are_unwatched(how):
    model = _model()
    opt = gl.optim.SGD(model.parameters(), lr=0.1)
    x, y = gl.randn(5, 3), gl.randn(5, 2)
    writer = MemoryWriter()
    with gl.watch(model, opt, writer=writer, strict=True, plugins=PLUGINS) as run:
        _step(model, opt, x, y)
        assert any(isinstance(h, RunHook) for h in _hooks(model))
        c = copy.deepcopy(model) if how == "deepcopy" else pickle.loads(pickle.dumps(model))
        assert _hooks(c) and all(isinstance(h, InertHook) for h in _hooks(c))
        for a, b in zip(model.parameters(), c.parameters(), strict=True):
            assert a is not b
            np.testing.assert_array_equal(a.numpy(force=True), b.numpy(force=True))
        records, step = len(writer.records), run.step
        _step(c, gl.optim.SGD(c.parameters(), lr=0.1), x, y)  # the copy trains: no logs
        assert (len(writer.records), run.step) == (records, step)
        _step(model, opt, x, y)  # the original still logs its own gradient norm
        g = [p.grad.numpy().astype(np.float64).ravel() for p in model[0].parameters()]
    norms = writer.series("scalar", "grad-norm/0")
    assert norms.steps == [0, 1]
    assert norms.values[1] == pytest.approx(float(np.linalg.norm(np.concatenate(g))),
                                            rel=1e-5)
