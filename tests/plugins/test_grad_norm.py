"""The grad-norm plugin: global and per-layer norms equal numpy's on the real gradients, raw
(before mutators) vs final (after), p-norms, the explosion warning, cadence, no hooks left and
an unchanged training trajectory."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from gradlog_plugins.grad_norm import GradNorm
from plugin_test_helpers import PoisonParamGrad, Recorder, ScaleGrads, baseline_losses, show

import gradlog as gl
from gradlog.plugin import PluginConfigError, resolve_plugins
from gradlog.testing import MemoryWriter, PluginHarness, tiny_model

MODULES = {"0": ["0.weight", "0.bias"], "3": ["3.weight", "3.bias"], "7": ["7.weight", "7.bias"]}


def _hand_norm(arrays, p=2.0):
    flat = np.concatenate([a.reshape(-1).astype(np.float64) for a in arrays])
    return float(np.max(np.abs(flat))) if p == math.inf else float(np.linalg.norm(flat, ord=p))


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, math.inf])
def test_norms_equal_numpy_norms_of_the_gradients(p, engine):
    rec = Recorder()
    h = PluginHarness(GradNorm, every=1, norm_type=p, plugins=[rec], engine=engine).run(steps=3)
    for step in range(3):
        grads = rec.grads[step]
        total = h.scalars("grad-norm/global").values[step]
        assert total == pytest.approx(_hand_norm(grads.values(), p), rel=1e-6)
        for module, names in MODULES.items():
            layer = h.scalars(f"grad-norm/{module}").values[step]
            assert layer == pytest.approx(_hand_norm([grads[n] for n in names], p), rel=1e-6)
        assert total > 0
    assert h.scalars("grad-norm/global").steps == [0, 1, 2]
    assert h.handles_left() == 0


def test_raw_is_before_the_mutators_and_final_after(engine):
    raw = PluginHarness(GradNorm, every=1, plugins=[ScaleGrads(0.25)],
                        engine=engine).run(steps=3)
    final = PluginHarness(GradNorm, every=1, source="final", plugins=[ScaleGrads(0.25)],
                          engine=engine).run(steps=3)
    assert raw.losses == final.losses
    for tag in ("grad-norm/global", "grad-norm/0", "grad-norm/3", "grad-norm/7"):
        r, f = raw.scalars(tag).values, final.scalars(tag).values
        assert f == pytest.approx([0.25 * v for v in r], rel=1e-6)


def test_logs_every_n_steps_only_and_per_layer_can_be_turned_off(engine):
    h = PluginHarness(GradNorm, every=3, per_layer=False, engine=engine).run(steps=7)
    assert h.tags() == ["grad-norm/global"]
    assert h.scalars("grad-norm/global").steps == [0, 3, 6]


def test_warns_and_logs_text_when_the_global_norm_is_above_warn_above(engine):
    with pytest.warns(RuntimeWarning, match="above warn_above=1e-06"):
        h = PluginHarness(GradNorm, every=2, warn_above=1e-6, engine=engine).run(steps=4)
    texts = h.texts("grad-norm/warnings")
    assert texts.steps == [0, 2]
    norm = h.scalars("grad-norm/global").values[0]
    assert f"{norm:.4g}" in texts.values[0] and "largest layers" in texts.values[0]
    assert h.plugin.state_dict() == {"warnings": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = PluginHarness(GradNorm, every=1, engine=engine).run(steps=3)  # inf: no warning
    assert quiet.texts("grad-norm/warnings").steps == []


def test_with_gradient_accumulation_the_raw_norm_is_of_the_accumulated_gradients(lib):
    gl.manual_seed(0)
    model = tiny_model(lib.__name__)
    opt = lib.optim.SGD(model.parameters(), lr=0.05)
    writer, expected = MemoryWriter(), []
    xs = [lib.randn(4, 1, 16, 16) for _ in range(2)]
    with gl.watch(model, opt, plugins=[GradNorm(every=1)], writer=writer, strict=True):
        for _ in range(3):
            opt.zero_grad()
            for x in xs:  # two micro-batches, two backwards, one step
                model(x).square().mean().backward()
            expected.append(_hand_norm([p.grad.numpy() for p in model.parameters()]))
            opt.step()
    series = writer.series("scalar", "grad-norm/global")
    assert series.steps == [0, 1, 2]
    assert series.values == pytest.approx(expected, rel=1e-6)


def test_a_nonfinite_norm_triggers_the_warning(engine):
    with pytest.warns(RuntimeWarning, match=r"norm inf at step 1 is above warn_above=1e\+09"):
        h = PluginHarness(GradNorm, every=1, warn_above=1e9, engine=engine,
                          plugins=[PoisonParamGrad("0.bias", steps={1})]).run(steps=2)
    assert h.texts("grad-norm/warnings").steps == [1]


def test_include_and_exclude_choose_the_layers_and_global_stays_over_every_parameter(engine):
    everything = PluginHarness(GradNorm, every=1, engine=engine).run(steps=2)
    h = PluginHarness(GradNorm, every=1, include=["3*", "7.weight"], exclude=["*.bias"],
                      engine=engine).run(steps=2)
    assert h.tags() == ["grad-norm/3", "grad-norm/7", "grad-norm/global"]
    assert h.scalars("grad-norm/global").values == everything.scalars("grad-norm/global").values
    rec = Recorder()
    PluginHarness(GradNorm, every=1, include=["3*", "7.weight"], exclude=["*.bias"],
                  plugins=[rec], engine=engine).run(steps=2)
    for step in range(2):
        grads = rec.grads[step]
        assert h.scalars("grad-norm/3").values[step] == pytest.approx(
            _hand_norm([grads["3.weight"]]), rel=1e-6)  # module 3's bias left out
        assert h.scalars("grad-norm/7").values[step] == pytest.approx(
            _hand_norm([grads["7.weight"]]), rel=1e-6)


def test_losses_are_bit_identical_with_and_without_the_plugin(engine):
    base = baseline_losses(5, engine=engine)
    assert PluginHarness(GradNorm, every=1, engine=engine).run(steps=5).losses == base
    assert PluginHarness(GradNorm, every=1, source="final",
                         engine=engine).run(steps=5).losses == base


@pytest.mark.parametrize("options, words", [
    ({"every": 0}, ["every", ">= 1"]),
    ({"source": "clipped"}, ["source", "'raw', 'final'"]),
    ({"norm_type": 0.5}, ["norm_type", ">= 1.0"]),
    ({"warn_above": -1.0}, ["warn_above", ">= 0.0"]),
])
def test_invalid_options_are_rejected_before_training(options, words):
    with pytest.raises(PluginConfigError) as info:
        GradNorm(**options)
    assert "grad-norm" in str(info.value)
    for w in words:
        assert w in str(info.value)


def test_cli_spec_and_show():
    (plugin,) = resolve_plugins(["grad-norm:every=1,warn_above=50,norm_type=inf"])
    assert (plugin.options.every, plugin.options.warn_above, plugin.options.norm_type) == \
        (1, 50.0, math.inf)
    text = show("grad-norm")
    assert "gradient-explosion monitor" in text
    for option in ("every", "source", "per_layer", "include", "exclude", "norm_type",
                   "warn_above"):
        assert f"  {option} (" in text
