"""What the plugin framework and gradlog train ask of a model through the engine, on both
engines: hook registrations (the registrar's, the adapter's, the model summary's) and the
training state an internal pass leaves as it found it."""

from __future__ import annotations

import numpy as np
import pytest

import gradlog as gl
from gradlog.engines import engine_named
from gradlog.testing import copy_weights

ENGINES = ["gradlog", "torch"]  # (torch: skipped when it is not installed)


def _engine(name: str):
    if name == "torch":
        pytest.importorskip("torch")
    return engine_named(name)()


def _bn_model(engine):
    nn = engine.nn
    gl.manual_seed(0)
    model = gl.nn.Sequential(gl.nn.Linear(3, 4), gl.nn.BatchNorm1d(4), gl.nn.Linear(4, 2))
    if engine.name == "gradlog":
        return model
    twin = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    return copy_weights(model, twin)


@pytest.mark.parametrize("name", ENGINES)
def test_training_state_kept_puts_modes_buffers_and_grads_back(name):
    engine = _engine(name)
    model = _bn_model(engine)
    x = engine.from_numpy(np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32))
    model(x).sum().backward()  # a training step's gradients and running statistics
    model.eval()
    model[1].train()
    grads = [p.grad for p in model.parameters()]
    copies = [engine.to_numpy(g).copy() for g in grads]
    bn = model[1]
    mean, var = bn.running_mean, bn.running_var
    saved = engine.to_numpy(mean).copy(), engine.to_numpy(var).copy()
    with engine.training_state_kept(model):
        assert all(p.grad is None for p in model.parameters())  # cleared for the block
        model.train()
        model(x * 3 + 1).sum().backward()
        assert not np.allclose(engine.to_numpy(bn.running_mean), saved[0])
    assert [m.training for m in model] == [False, True, False] and not model.training
    assert all(p.grad is g for p, g in zip(model.parameters(), grads))
    for g, c in zip(grads, copies):
        np.testing.assert_array_equal(engine.to_numpy(g), c)
    assert bn.running_mean is mean and bn.running_var is var
    np.testing.assert_array_equal(engine.to_numpy(bn.running_mean), saved[0])
    np.testing.assert_array_equal(engine.to_numpy(bn.running_var), saved[1])


@pytest.mark.parametrize("name", ENGINES)
def test_register_hook_registers_through_the_named_method(name):
    engine = _engine(name)
    model = _bn_model(engine)
    seen = []
    handle = engine.register_hook(model[0], "register_forward_hook",
                                  lambda m, args, out: seen.append(tuple(out.shape)),
                                  prepend=True)
    x = engine.from_numpy(np.zeros((2, 3), np.float32))
    model(x)
    handle.remove()
    model(x)
    assert seen == [(2, 4)]
    opt = engine.optim.SGD(model.parameters(), lr=0.1)
    steps = []
    handle = engine.register_hook(opt, "register_step_pre_hook",
                                  lambda o, args, kwargs: steps.append(o is opt))
    opt.step()
    assert steps == [True]
    assert engine.count_hooks(model, opt) == 1
    handle.remove()


def test_register_hook_refuses_what_is_not_a_hook_registration():
    engine = _engine("gradlog")
    with pytest.raises(ValueError, match="unknown hook registration 'load_state_dict'; the "
                                         "engine registers register_forward_hook"):
        engine.register_hook(gl.nn.Linear(1, 1), "load_state_dict", print)


def test_engine_named_names_the_engines_when_it_knows_none():
    assert engine_named("gradlog").name == "gradlog"
    with pytest.raises(ValueError, match="no engine named 'jax'; the engines are 'gradlog'"):
        engine_named("jax")
