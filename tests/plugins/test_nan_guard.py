"""The nan-guard plugin: it names the first non-finite parameter in backward order, a skipped
step leaves parameters and optimizer state bit-identical, skips are counted, raise and
max_consecutive abort the run, warn lets the step happen, a non-finite loss is reported, and
with finite gradients it changes nothing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gradlog_plugins.nan_guard import NanGuard
from plugin_test_helpers import (
    PoisonActivationGrad,
    PoisonParamGrad,
    Recorder,
    baseline_losses,
    show,
)

import gradlog as gl
from gradlog.engines import engine_for
from gradlog.plugin import PluginAbort, PluginConfigError, resolve_plugins
from gradlog.testing import MemoryWriter, PluginHarness, tiny_model


def _harness(engine, optimizer="sgd", **kwargs):
    gl.manual_seed(0)
    model = tiny_model(engine)
    optim = engine_for(model).optim
    opt = (optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if optimizer == "sgd" else
           optim.Adam(model.parameters(), lr=1e-2))
    return PluginHarness(NanGuard, model=model, optimizer=opt, **kwargs)


def _run(h, steps):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h.run(steps=steps)
    return [str(w.message) for w in caught if "nan-guard" in str(w.message)]


def _same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_skipped_step_leaves_parameters_and_optimizer_state_bit_identical(optimizer, engine):
    rec = Recorder()
    h = _harness(engine, optimizer, plugins=[PoisonActivationGrad("3", steps={2}), rec])
    messages = _run(h, steps=5)
    assert len(messages) == 1 and "step 2" in messages[0] and "step skipped" in messages[0]
    params_before, state_before = rec.before[2]
    params_after, state_after = rec.after[2]
    assert _same(params_before, params_after)
    assert state_before and _same(state_before, state_after)  # momentum / exp_avg, exp_avg_sq
    for step in (1, 3):  # the steps around it did update both
        assert not _same(rec.before[step][0], rec.after[step][0])
        assert not _same(rec.before[step][1], rec.after[step][1])
    assert all(np.isfinite(h.losses))
    assert h.scalars("nan-guard/skipped").steps == [2]
    assert h.scalars("nan-guard/skipped").values == [1.0]
    assert h.scalars("nan-guard/nonfinite_steps").steps == [2]
    assert h.texts("nan-guard/report").steps == [2]
    assert h.run_obj.skipped_steps == 1
    assert h.handles_left() == 0


def test_names_the_first_parameter_in_backward_order_not_in_model_order(engine):
    # NaN born at the output of module 3 reaches 3.* and, further back, 0.*; model order would
    # blame 0.weight, backward order finds module 3, where it appeared.
    rec = Recorder()
    h = _harness(engine, plugins=[PoisonActivationGrad("3", steps={1}), rec])
    _run(h, steps=2)
    report = h.plugin.last_report
    bad = sorted(n for n, g in rec.grads[1].items() if not np.isfinite(g).all())
    assert bad == ["0.bias", "0.weight", "3.bias", "3.weight"]
    assert "at step 1" in report and "module '3'" in report
    assert "parameter '3.weight'" in report or "parameter '3.bias'" in report
    assert "4 of 6 parameters affected" in report
    listed = report.split("affected: ")[1].split(";")[0].split(", ")
    assert listed[:2] in (["3.weight", "3.bias"], ["3.bias", "3.weight"])
    assert set(listed) == set(bad)


def test_a_single_inf_element_is_found(engine):
    h = _harness(engine, plugins=[PoisonParamGrad("7.weight", steps={0})])
    _run(h, steps=2)
    assert "parameter '7.weight' (module '7')" in h.plugin.last_report
    assert "1 of 6" in h.plugin.last_report


def test_action_raise_aborts_naming_the_parameter_before_the_update(engine):
    rec = Recorder()
    h = _harness(engine, action="raise", plugins=[PoisonActivationGrad("3", steps={1}), rec])
    with pytest.raises(PluginAbort, match=r"step 1, first in backward order in parameter '3\."):
        _run(h, steps=4)
    assert len(h.losses) == 1  # batch 1 never finished
    np.testing.assert_array_equal(rec.before[1][0]["3.weight"],
                                  np.array(h.model.get_parameter("3.weight").detach().numpy()))
    assert h.handles_left() == 0


def test_max_consecutive_nonfinite_steps_abort_the_run(engine):
    h = _harness(engine, max_consecutive=3, plugins=[PoisonActivationGrad("3", steps=range(1, 99))])
    with pytest.raises(PluginAbort, match=r"3 steps in a row .*max_consecutive=3"):
        _run(h, steps=10)
    assert h.scalars("nan-guard/skipped").steps == [1, 2, 3]
    assert h.scalars("nan-guard/skipped").values == [1.0, 2.0, 3.0]
    assert h.handles_left() == 0


def test_a_finite_step_resets_the_consecutive_count(engine):
    h = _harness(engine, max_consecutive=2, plugins=[PoisonActivationGrad("3", steps={1, 3, 5})])
    _run(h, steps=7)  # never two in a row: no abort
    assert h.scalars("nan-guard/skipped").steps == [1, 3, 5]
    assert h.plugin.state_dict()["consecutive"] == 0


def test_action_warn_lets_the_step_happen(engine):
    rec = Recorder()
    h = _harness(engine, action="warn", plugins=[PoisonParamGrad("7.bias", steps={1}), rec])
    messages = _run(h, steps=2)
    assert len(messages) == 1 and "the step is applied (action=warn)" in messages[0]
    assert not np.isfinite(rec.after[1][0]["7.bias"]).all()
    assert h.scalars("nan-guard/skipped").steps == []
    assert h.scalars("nan-guard/nonfinite_steps").steps == [1]


def test_finite_training_is_unchanged_and_logs_nothing(engine):
    h = PluginHarness(NanGuard, engine=engine).run(steps=6)
    assert h.losses == baseline_losses(6, engine=engine)
    assert h.tags() == []
    assert h.handles_left() == 0


def test_skips_and_reports_a_nonfinite_loss_in_a_users_own_loop(lib):
    gl.manual_seed(0)
    model = tiny_model(lib.__name__)
    opt = lib.optim.SGD(model.parameters(), lr=0.05)
    writer = MemoryWriter()
    x = lib.randn(4, 1, 16, 16)
    run = gl.watch(model, opt, plugins=[NanGuard(), PoisonParamGrad("0.bias", steps={1})],
                   writer=writer, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with run:
            for step in range(3):
                opt.zero_grad()
                loss = model(x).sum()
                loss.backward()
                before = np.array(model.get_parameter("0.bias").detach().numpy())
                opt.step()
                after = np.array(model.get_parameter("0.bias").detach().numpy())
                assert np.array_equal(before, after) == (step == 1)
                run.log_scalar("train/loss", float("inf") if step == 2 else loss)
    assert writer.series("scalar", "nan-guard/skipped").steps == [1]
    assert writer.series("scalar", "nan-guard/nonfinite_loss").steps == [2]
    assert "non-finite training loss inf at step 2" in \
        writer.series("text", "nan-guard/report").values[-1]


@pytest.mark.parametrize("options, words", [
    ({"action": "ignore"}, ["action", "'skip', 'raise', 'warn'"]),
    ({"max_consecutive": 0}, ["max_consecutive", ">= 1"]),
    ({"check_loss": "yes"}, ["check_loss", "true or false"]),
])
def test_invalid_options_are_rejected_before_training(options, words):
    with pytest.raises(PluginConfigError) as info:
        NanGuard(**options)
    assert "nan-guard" in str(info.value)
    for w in words:
        assert w in str(info.value)


def test_cli_spec_and_show():
    (plugin,) = resolve_plugins(["nan-guard:action=raise"])
    assert plugin.options.action == "raise" and plugin.order == 0 and plugin.kind == "mutator"
    text = show("nan-guard")
    assert "backward order" in text
    for option in ("action", "max_consecutive", "check_loss"):
        assert f"  {option} (" in text
