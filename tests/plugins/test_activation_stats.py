"""The activation-stats plugin: a layer with a very negative bias is 100 % dead, mean / std /
dead fraction equal a hand computation on the probe batch, the probe cadence (every N steps and
at epoch end, no duplicates), the current-batch fallback, tanh saturation, hooks only inside
its own probe pass, and an unchanged training trajectory."""

from __future__ import annotations

import numpy as np
import pytest
from gradlog_plugins.activation_stats import ActivationStats
from plugin_test_helpers import Recorder, baseline_losses, same_model, show

import gradlog as gl
from gradlog.engines import engine_for
from gradlog.plugin import PluginConfigError, resolve_plugins
from gradlog.testing import PluginHarness, tiny_model


def _outputs(model, x, names):
    """The outputs of the named modules for input ``x`` (eval mode, no autograd)."""
    got, handles = {}, []
    for name in names:
        module = model.get_submodule(name)
        handles.append(module.register_forward_hook(
            lambda m, a, out, name=name: got.__setitem__(name, np.array(out.detach().numpy()))))
    was = model.training
    model.eval()
    try:
        with engine_for(model).no_grad():
            model(x)
    finally:
        model.train(was)
        for h in handles:
            h.remove()
    return got


def _last(h, tag):
    return h.scalars(tag).values[-1]


def test_a_layer_with_a_very_negative_bias_is_reported_fully_dead(lib):
    gl.manual_seed(0)
    model = tiny_model(lib.__name__)
    with lib.no_grad():
        model.get_parameter("0.bias").fill_(-100.0)
    h = PluginHarness(ActivationStats, model=model, every=1).run(steps=3)
    assert h.scalars("activation-stats/1/dead_fraction").values == [1.0, 1.0, 1.0]
    assert h.scalars("activation-stats/1/mean").values == [0.0, 0.0, 0.0]
    assert h.scalars("activation-stats/1/std").values == [0.0, 0.0, 0.0]
    assert h.handles_left() == 0


def test_stats_equal_a_hand_computation_on_the_probe_batch(engine):
    h = PluginHarness(ActivationStats, every=1, engine=engine).run(steps=3)
    probe = h.run_obj.probe_sets["probe"]["images"]
    out = _outputs(h.model, probe, ["1", "4"])  # the final weights: those after step 2
    for name, a in out.items():
        a = a.astype(np.float64)
        dead = np.mean([np.all(a[:, c] <= 0) for c in range(a.shape[1])])
        assert _last(h, f"activation-stats/{name}/mean") == pytest.approx(a.mean(), rel=1e-9)
        assert _last(h, f"activation-stats/{name}/std") == pytest.approx(a.std(), rel=1e-9)
        assert _last(h, f"activation-stats/{name}/dead_fraction") == dead
        assert a.mean() > 0
    assert h.tags() == sorted(f"activation-stats/{m}/{k}" for m in ("1", "4")
                              for k in ("mean", "std", "dead_fraction"))


@pytest.mark.parametrize("every, steps, expected", [
    (4, 6, [0, 4, 5, 8, 11]),  # every 4 steps, plus each epoch's last step (5, 11)
    (4, 5, [0, 4, 8, 9]),      # the first epoch ends at step 4, which was just probed
    (100, 3, [0, 2, 5]),
])
def test_probes_every_n_steps_and_at_epoch_end_without_duplicates(every, steps, expected,
                                                                 engine):
    h = PluginHarness(ActivationStats, every=every, engine=engine).run(steps=steps, epochs=2)
    assert h.scalars("activation-stats/4/mean").steps == expected


def test_falls_back_to_the_current_batch_without_a_probe_set(lib):
    rec = Recorder()
    h = PluginHarness(ActivationStats, every=1, probe_set="missing", plugins=[rec],
                      engine=lib.__name__).run(steps=2)
    out = _outputs(h.model, lib.from_numpy(rec.batches[1]), ["4"])["4"].astype(np.float64)
    assert _last(h, "activation-stats/4/mean") == pytest.approx(out.mean(), rel=1e-9)
    assert _last(h, "activation-stats/4/std") == pytest.approx(out.std(), rel=1e-9)


def test_tanh_reports_saturation_and_include_selects_any_module(lib):
    model = same_model(lib, lambda nn: nn.Sequential(nn.Flatten(), nn.Linear(256, 8),
                                                     nn.Tanh(), nn.Linear(8, 4)))
    with lib.no_grad():
        model.get_parameter("1.weight").mul_(200.0)
    opt = lib.optim.SGD(model.parameters(), lr=0.0)
    h = PluginHarness(ActivationStats, model=model, optimizer=opt, every=1,
                      include=["1", "2"]).run(steps=1)
    a = _outputs(model, h.run_obj.probe_sets["probe"]["images"], ["2"])["2"]
    saturated = h.scalars("activation-stats/2/saturated_fraction").values
    assert saturated == [pytest.approx(np.mean(np.abs(a) > 0.97))] and saturated[0] > 0.5
    assert "activation-stats/2/dead_fraction" not in h.tags()
    assert "activation-stats/1/dead_fraction" in h.tags()  # a Linear output, units = features


def test_include_and_exclude_choose_the_modules(engine):
    h = PluginHarness(ActivationStats, every=1, include=["?"], exclude=["0", "[5-7]"],
                      engine=engine).run(steps=1)
    assert sorted({t.split("/")[1] for t in h.tags()}) == ["1", "2", "3", "4"]


def test_hooks_exist_only_inside_its_own_probe_pass(engine):
    rec = Recorder(count_hooks=True)
    h = PluginHarness(ActivationStats, every=1, plugins=[rec], engine=engine).run(steps=3)
    assert set(rec.hooks_at_start.values()) == {0} and set(rec.hooks_at_end.values()) == {0}
    assert h.handles_left() == 0


def test_training_losses_are_unchanged_by_the_probes(engine):
    base = baseline_losses(6, epochs=2, engine=engine)
    assert PluginHarness(ActivationStats, every=1,
                         engine=engine).run(steps=6, epochs=2).losses == base
    assert PluginHarness(ActivationStats, every=2, mode="train",
                         engine=engine).run(6, epochs=2).losses == base


@pytest.mark.parametrize("options, words", [
    ({"every": 0}, ["every", ">= 1"]),
    ({"mode": "test"}, ["mode", "'eval', 'train'"]),
    ({"at_epoch_end": "no"}, ["at_epoch_end", "true or false"]),
])
def test_invalid_options_are_rejected_before_training(options, words):
    with pytest.raises(PluginConfigError) as info:
        ActivationStats(**options)
    assert "activation-stats" in str(info.value)
    for w in words:
        assert w in str(info.value)


def test_cli_spec_and_show():
    (plugin,) = resolve_plugins(['activation-stats:every=10,include=["features.*"]'])
    assert (plugin.options.every, plugin.options.include) == (10, ["features.*"])
    text = show("activation-stats")
    assert "dead-unit fraction" in text
    for option in ("every", "include", "exclude", "probe_set", "mode", "at_epoch_end"):
        assert f"  {option} (" in text
