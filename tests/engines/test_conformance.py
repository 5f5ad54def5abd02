"""Every engine keeps the engine interface: it implements every abstract method (a missing one
fails when the engine's class is defined), and the shared behaviours hold on its own tensors."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from gradlog.engines import Engine, engine_classes
from gradlog.engines.base import _abstract_names
from gradlog.tensorboard.histogram import counts_proto, histogram_proto

NAMES = [c.name for c in engine_classes()]
HAVE = {"gradlog": True, "torch": importlib.util.find_spec("torch") is not None}


def _engine(name: str) -> Engine:
    if not HAVE.get(name, True):
        pytest.skip(f"{name} is not installed")
    cls = next(c for c in engine_classes() if c.name == name)
    return cls()


def _model(name: str):
    if name == "torch":
        import torch
        return torch.nn.Linear(3, 2)
    from gradlog import nn
    return nn.Linear(3, 2)


def test_engine_is_abstract_and_lists_the_interface() -> None:
    assert {"histogram_counts", "nonfinite_counts", "to_numpy", "from_numpy", "claims",
            "nn", "optim", "on_backward_end"} <= _abstract_names(Engine)
    with pytest.raises(TypeError):
        Engine()


def test_an_engine_missing_a_method_fails_where_it_is_defined() -> None:
    registered = list(Engine.registered)
    with pytest.raises(TypeError, match=r"engine 'half' .* does not implement .*histogram_counts"):
        class Half(Engine):  # noqa: F841
            name = "half"
    assert Engine.registered == registered


@pytest.mark.parametrize("name", NAMES)
def test_every_engine_implements_every_abstract_method(name) -> None:
    cls = next(c for c in engine_classes() if c.name == name)
    assert not getattr(cls, "__abstractmethods__", frozenset())


@pytest.mark.parametrize("name", NAMES)
def test_engine_claims_its_models_and_round_trips_arrays(name) -> None:
    engine = _engine(name)
    model = _model(name)
    assert type(engine).claims(model)
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = engine.from_numpy(array)
    assert engine.is_tensor(t) and not engine.is_tensor(array)
    np.testing.assert_array_equal(engine.to_numpy(t), array)
    with engine.no_grad():
        assert not engine.is_grad_enabled()


@pytest.mark.parametrize("name", NAMES)
def test_engine_statistics_equal_numpy(name) -> None:
    engine = _engine(name)
    values = np.random.default_rng(0).standard_normal(500).astype(np.float32)
    values[[3, 4]] = [np.nan, -np.inf]
    t = engine.from_numpy(values)
    for bins in ("tensorflow", 20, [-1.0, 0.0, 1.0]):
        counts = engine.histogram_counts([t], bins)()[0]
        expected, nonfinite = histogram_proto(values, bins)
        got = counts_proto(counts)
        assert list(got.bucket) == list(expected.bucket)
        assert list(got.bucket_limit) == list(expected.bucket_limit)
        assert counts.nonfinite == nonfinite == 2
    assert engine.nonfinite_counts([t]) == [2]


@pytest.mark.parametrize("name", NAMES)
def test_engine_summaries_equal_the_float64_reference(name) -> None:
    from gradlog.utils.reductions import value_summary
    engine = _engine(name)
    rng = np.random.default_rng(4)
    values = np.maximum(rng.standard_normal((8, 5, 3)), 0).astype(np.float32)
    values[:, 2] = 0.0  # a dead unit
    tanh = np.tanh(rng.standard_normal((6, 4)) * 3).astype(np.float32)
    empty = np.zeros((0, 3), dtype=np.float32)
    for arrays, bounds in (([values, empty], None), ([tanh, values], (-0.97, 0.97))):
        got = engine.summaries([engine.from_numpy(a) for a in arrays], bounds)()
        for summary, a in zip(got, arrays):
            np.testing.assert_allclose(summary, value_summary(a, bounds), rtol=1e-12,
                                       atol=1e-15)
    assert engine.summaries([engine.from_numpy(values)])()[0].dead_units == 0.2
    # a NaN keeps its unit alive (it is not <= 0), and makes the mean and std NaN
    values[0, 2, 0] = np.nan
    summary = engine.summaries([engine.from_numpy(values)])()[0]
    assert summary.dead_units == 0.0 and math.isnan(summary.mean) and math.isnan(summary.std)
