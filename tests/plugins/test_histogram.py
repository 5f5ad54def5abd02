"""The histogram plugin: what it logs and when, raw vs final gradients around a mutator, update
ratios against a hand computation, non-finite values counted through the real writer, hooks
only on logging steps, and an unchanged training trajectory."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from gradlog_plugins.histogram import KINDS, Histogram, update_ratios
from gradlog_plugins.nan_guard import NanGuard
from plugin_test_helpers import (
    PoisonActivationGrad,
    PoisonParamGrad,
    Recorder,
    ScaleGrads,
    baseline_losses,
    hooks_on,
    read_events,
    show,
)

import gradlog as gl
from gradlog.plugin import Plugin, PluginConfigError, resolve_plugins
from gradlog.tensorboard import SummaryWriter
from gradlog.testing import MemoryWriter, PluginHarness

PARAMS = ["0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias"]
LEAVES = ["0", "1", "2", "3", "4", "5", "6", "7"]


def test_logs_every_kind_only_at_logging_steps_and_leaves_no_hooks(engine):
    h = PluginHarness(Histogram, every=2, engine=engine).run(steps=5)
    for p in PARAMS:
        for kind in ("weight", "grad_raw", "grad"):
            assert h.histograms(f"histogram/{kind}/{p}").steps == [0, 2, 4]
        assert h.scalars(f"histogram/update_ratio/{p}").steps == [0, 2, 4]
    for m in LEAVES:
        assert h.histograms(f"histogram/activation/{m}").steps == [0, 2, 4]
    assert len(h.tags()) == 6 * 4 + 8
    assert h.handles_left() == 0


def test_values_are_the_real_tensors(engine):
    rec = Recorder()
    h = PluginHarness(Histogram, every=1, plugins=[rec], engine=engine).run(steps=3)
    for step in range(3):
        weights = rec.before[step][0]
        for p in PARAMS:
            logged = h.histograms(f"histogram/weight/{p}").values[step]
            np.testing.assert_array_equal(logged, weights[p].reshape(-1))
            raw = h.histograms(f"histogram/grad_raw/{p}").values[step]
            np.testing.assert_array_equal(raw, rec.grads[step][p].reshape(-1))
            assert raw.size == weights[p].size  # every element, nothing dropped
    # the activation of the last layer is the logits: batch 16 x 4 classes
    assert h.histograms("histogram/activation/7").values[0].size == 16 * 4


def test_raw_gradients_are_unscaled_and_final_ones_scaled_by_the_mutator(engine):
    rec = Recorder()
    h = PluginHarness(Histogram, every=1, kinds=["grad_raw", "grad"],
                      plugins=[ScaleGrads(0.5), rec], engine=engine).run(steps=3)
    for step in range(3):
        for p in PARAMS:
            raw = h.histograms(f"histogram/grad_raw/{p}").values[step]
            final = h.histograms(f"histogram/grad/{p}").values[step]
            # raw: as backward made it; final: as the step used it
            np.testing.assert_array_equal(raw, rec.grads[step][p].reshape(-1))
            np.testing.assert_array_equal(final, 0.5 * raw)
            assert np.abs(raw).max() > 0


def _histograms_by_event(log_dir) -> list[dict]:
    """For each event holding histograms, ``{tag: serialized HistogramProto}``."""
    return [{v.tag: v.histo.SerializeToString() for v in e.summary.value if v.HasField("histo")}
            for e in read_events(log_dir) if any(v.HasField("histo") for v in e.summary.value)]


@pytest.mark.parametrize("mutated", [False, True])
def test_unchanged_gradients_are_one_histogram_under_both_tags(tmp_path, engine, mutated):
    h = PluginHarness(Histogram, every=1, kinds=["grad_raw", "grad"], engine=engine,
                      plugins=[ScaleGrads(0.5)] if mutated else [])
    h.run_obj.writer = SummaryWriter(str(tmp_path))
    h.run(steps=2)
    events = _histograms_by_event(tmp_path)
    # a step's gradients of one kind are one event (one call for the writer's thread)
    assert len(events) == 2 * (2 if mutated else 1)
    final_tags = [f"histogram/grad/{p}" for p in PARAMS]
    raw_tags = [f"histogram/grad_raw/{p}" for p in PARAMS]
    for i, histos in enumerate(events):
        if mutated:  # raw and final differ: each its own histogram, final ones first
            assert list(histos) == (final_tags if i % 2 == 0 else raw_tags)
            continue
        assert sorted(histos) == sorted(final_tags + raw_tags)
        for final_tag, raw_tag in zip(final_tags, raw_tags):
            assert histos[raw_tag] == histos[final_tag]
    if not mutated:  # and distinct parameters really are distinct histograms
        assert len({histos[t] for t in final_tags}) == len(PARAMS)


def test_a_clip_in_the_users_loop_is_in_both_raw_and_final_gradients(lib):
    # Gradients are read when the optimizer is about to apply them (the one moment they are
    # final under accumulation and AMP): raw is before gradlog's mutators, after the loop's own
    # clip_grad_norm_, exactly as PyTorch's AMP recipe (unscale_, clip, step) gives them.
    lib.manual_seed(0)
    model = lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.ReLU(), lib.nn.Linear(5, 2))
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    writer, unclipped, applied = MemoryWriter(), [], []
    with gl.watch(model, opt, plugins=[Histogram(every=1, kinds=["grad_raw", "grad"])],
                  writer=writer, strict=True):
        for _ in range(2):
            opt.zero_grad()
            model(lib.randn(4, 3)).square().mean().backward()
            unclipped.append(np.array(model.get_parameter("0.weight").grad.numpy()))
            lib.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)  # no plugin knows of it
            applied.append(np.array(model.get_parameter("0.weight").grad.numpy()))
            opt.step()
    for kind in ("grad_raw", "grad"):
        logged = writer.series("histogram", f"histogram/{kind}/0.weight").values
        for step in range(2):
            np.testing.assert_array_equal(logged[step], applied[step].reshape(-1))
    assert not np.array_equal(unclipped[0], applied[0])


@pytest.mark.parametrize("to_files", [False, True])  # (files: computed on the writer's thread)
def test_update_ratio_equals_norm_of_delta_over_norm_of_weight(engine, to_files, tmp_path):
    rec = Recorder()
    h = PluginHarness(Histogram, every=2, kinds=["update_ratio"], plugins=[rec],
                      engine=engine)
    if to_files:
        h.run_obj.writer = SummaryWriter(str(tmp_path))
    h.run(steps=4)
    if to_files:
        h.run_obj.writer.close()
        logged = {(v.tag, e.step): v.simple_value for e in read_events(tmp_path)
                  for v in e.summary.value}
    else:
        logged = {}
        for p in PARAMS:
            series = h.scalars(f"histogram/update_ratio/{p}")
            logged.update({(f"histogram/update_ratio/{p}", step): value
                           for step, value in zip(series.steps, series.values)})
    assert sorted({step for _, step in logged}) == [0, 2]
    for step in (0, 2):
        before, after = rec.before[step][0], rec.after[step][0]
        for p in PARAMS:
            w0, w1 = before[p].astype(np.float64), after[p].astype(np.float64)
            expected = np.linalg.norm(w1 - w0) / np.linalg.norm(w0)
            value = logged[(f"histogram/update_ratio/{p}", step)]
            assert value == pytest.approx(expected, rel=1e-6)
            assert 1e-5 < value < 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_update_ratio_of_large_tensors_is_the_float64_formula(engine, dtype):
    from gradlog.engines import engine_classes
    eng = next(c for c in engine_classes() if c.name == engine)()
    rng = np.random.default_rng(0)
    before = rng.standard_normal((300, 700)).astype(dtype)  # several pieces, a partial last
    after = (before + rng.standard_normal(before.shape) * 1e-3).astype(dtype)
    wide = before.astype(np.float64)
    expected = np.linalg.norm(after.astype(np.float64) - wide) / np.linalg.norm(wide)
    b, a = eng.from_numpy(before), eng.from_numpy(after)
    assert update_ratios(eng, [a], [b])()[0] == pytest.approx(expected, rel=1e-12)
    zero = eng.from_numpy(np.zeros(3, dtype))
    assert update_ratios(eng, [eng.from_numpy(after[0, :3])], [zero])() == [None]


def test_activation_hooks_exist_only_during_logging_steps(engine):
    rec = Recorder(count_hooks=True)
    h = PluginHarness(Histogram, every=3, plugins=[rec], engine=engine).run(steps=7)
    # the recorder runs after the histogram's on_batch_start: 8 leaf modules hooked on steps
    # 0, 3, 6, and the model itself (its hook ends them with the forward pass), none
    # otherwise and none at any batch end
    assert rec.hooks_at_start == {0: 9, 1: 0, 2: 0, 3: 9, 4: 0, 5: 0, 6: 9}
    assert set(rec.hooks_at_end.values()) == {0}
    assert h.handles_left() == 0


def test_nonfinite_values_are_counted_by_the_writer_and_buckets_hold_every_other(tmp_path,
                                                                               engine):
    h = PluginHarness(Histogram, every=1, engine=engine,
                      plugins=[PoisonParamGrad("7.bias", steps={1}, value=math.inf)])
    h.run_obj.writer = SummaryWriter(str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the writer's one-time notice
        h.run(steps=2)
    histos, scalars = {}, {}
    for event in read_events(tmp_path):
        for v in event.summary.value:
            if v.HasField("histo"):
                histos[(v.tag, event.step)] = v.histo
            else:
                scalars[(v.tag, event.step)] = v.simple_value
    sizes = {"0.weight": 36, "0.bias": 4, "3.weight": 288, "3.bias": 8, "7.weight": 32,
             "7.bias": 4}
    for p, n in sizes.items():
        for step in (0, 1):
            assert sum(histos[(f"histogram/weight/{p}", step)].bucket) == n
            bad = 1 if (p, step) == ("7.bias", 1) else 0
            for kind in ("grad_raw", "grad"):
                proto = histos[(f"histogram/{kind}/{p}", step)]
                assert sum(proto.bucket) == n - bad and proto.num == n - bad
    assert scalars[("histogram/grad_raw/7.bias/nonfinite", 1)] == 1
    assert scalars[("histogram/grad/7.bias/nonfinite", 1)] == 1
    assert not any(tag.endswith("/nonfinite") and "7.bias" not in tag for tag, _ in scalars)
    assert sum(histos[("histogram/activation/7", 0)].bucket) == 16 * 4


def test_in_a_users_own_loop_with_gradient_accumulation(lib):
    lib.manual_seed(0)
    model = lib.nn.Sequential(lib.nn.Linear(3, 5), lib.nn.ReLU(), lib.nn.Linear(5, 2))
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    writer, accumulated = MemoryWriter(), []
    xs = [lib.randn(4, 3) for _ in range(2)]
    with gl.watch(model, opt, plugins=[Histogram(every=2)], writer=writer, strict=True):
        for _ in range(3):
            opt.zero_grad()
            for x in xs:  # two micro-batches, one step
                model(x).square().mean().backward()
            accumulated.append(np.array(model.get_parameter("0.weight").grad.numpy()))
            opt.step()
    raw = writer.series("histogram", "histogram/grad_raw/0.weight")
    assert raw.steps == [0, 2]
    np.testing.assert_array_equal(raw.values[1], accumulated[2].reshape(-1))
    acts = writer.series("histogram", "histogram/activation/1")
    assert acts.steps == [0, 2] and acts.values[0].size == 4 * 5  # the first micro-batch
    assert hooks_on(model, opt) == 0


def test_a_step_skipped_by_nan_guard_still_logs_its_raw_gradients(engine):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        h = PluginHarness(Histogram, every=1, engine=engine, plugins=[
            NanGuard(), PoisonActivationGrad("3", steps={1})]).run(steps=3)
    raw = h.histograms("histogram/grad_raw/3.weight")
    assert raw.steps == [0, 1, 2] and np.isnan(raw.values[1]).all()
    assert h.histograms("histogram/grad/3.weight").steps == [0, 2]  # never applied
    assert h.scalars("histogram/update_ratio/3.weight").steps == [0, 2]


def test_include_exclude_and_kinds_select_what_is_logged(engine):
    h = PluginHarness(Histogram, every=1, include=["3*", "4"], exclude=["*.bias"],
                      kinds=["weight", "activation"], engine=engine).run(steps=1)
    assert h.tags() == ["histogram/activation/3", "histogram/activation/4",
                        "histogram/weight/3.weight"]


def test_losses_are_bit_identical_with_and_without_the_plugin(engine):
    base = baseline_losses(6, engine=engine)
    assert PluginHarness(Histogram, every=1, engine=engine).run(steps=6).losses == base
    assert PluginHarness(Histogram, every=4, engine=engine).run(steps=6).losses == base


@pytest.mark.parametrize("options, words", [
    ({"every": 0}, ["every", ">= 1"]),
    ({"kinds": ["weight", "gradient"]}, ["kinds", "'gradient'", ", ".join(KINDS)]),
    ({"bins": 0}, ["bins", ">= 1"]),
    ({"bins": "many"}, ["bins", "'many'", "tensorflow"]),
    ({"colour": 1}, ["colour", "every, include"]),
])
def test_invalid_options_are_rejected_before_training(options, words):
    with pytest.raises(PluginConfigError) as info:
        Histogram(**options)
    assert "histogram" in str(info.value)
    for w in words:
        assert w in str(info.value)


def test_cli_spec_and_show():
    (plugin,) = resolve_plugins(['histogram:every=5,include=["fc*","conv*"],bins=30'])
    assert (plugin.options.every, plugin.options.include, plugin.options.bins) == \
        (5, ["fc*", "conv*"], 30)
    with pytest.raises(PluginConfigError, match="kinds"):
        resolve_plugins(['histogram:kinds=["weights"]'])
    text = show("histogram")
    assert "Histograms of weights" in text and "update_ratio" in text
    for option in ("every", "include", "exclude", "kinds", "bins"):
        assert f"  {option} (" in text


def test_a_module_run_twice_in_a_step_logs_each_of_its_activations(lib):
    lib.manual_seed(0)

    class Twice(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lib.nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(self.lin(x))

    model = Twice()
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    outputs, writer = [], MemoryWriter()
    model.lin.register_forward_hook(lambda m, a, o: outputs.append(np.array(o.detach().numpy())))
    with gl.watch(model, opt, plugins=[Histogram(every=1, kinds=["activation"])],
                  writer=writer, strict=True):
        for _ in range(2):
            opt.zero_grad()
            model(lib.randn(4, 3)).sum().backward()
            opt.step()
    # each call under its own tag: lin (the first in the forward pass), lin-1 (the second)
    logged = [(step, v) for step in (0, 1) for tag in ("lin", "lin-1")
              for _, t, at, v in writer.records
              if t == f"histogram/activation/{tag}" and at == step]
    assert [step for step, _ in logged] == [0, 0, 1, 1]
    for (_, values), out in zip(logged, outputs, strict=True):
        np.testing.assert_array_equal(values, out.reshape(-1).astype(np.float64))


class _PerturbWeights(Plugin):
    """Changes the weights in place between the batch's start and the optimizer step (as
    sharpness-aware methods perturb them)."""

    name = "test-perturb-weights"
    kind = "mutator"
    order = 10

    def on_before_optimizer_step(self, run):
        with run.engine.no_grad():
            for p in run.model.parameters():
                p.mul_(1.5)


@pytest.mark.parametrize("perturbed", [False, True])
def test_update_ratios_start_from_the_weights_just_before_the_step(engine, perturbed):
    # the first batch's weight copy serves the weight histograms and, unless the step changed
    # the weights in place since, the update ratios; after such a change, a new copy
    rec = Recorder()
    extra = [_PerturbWeights()] if perturbed else []
    h = PluginHarness(Histogram, every=1, kinds=["weight", "update_ratio"],
                      plugins=[rec, *extra], engine=engine).run(steps=2)
    for step in range(2):
        before, after = rec.before[step][0], rec.after[step][0]
        for p in PARAMS:
            np.testing.assert_array_equal(  # the batch's weights, not the perturbed ones
                h.histograms(f"histogram/weight/{p}").values[step], before[p].reshape(-1))
            w0 = (before[p] * before[p].dtype.type(1.5) if perturbed else before[p]
                  ).astype(np.float64)
            expected = np.linalg.norm(after[p].astype(np.float64) - w0) / np.linalg.norm(w0)
            value = h.scalars(f"histogram/update_ratio/{p}").values[step]
            assert value == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_update_ratios_of_weights_with_a_nonfinite_value_are_those_without_histograms(engine,
                                                                                      value):
    # (with weight histograms ||before||**2 is their sums, which leave such values out)
    logged = []
    for kinds in (["weight", "update_ratio"], ["update_ratio"]):
        h = PluginHarness(Histogram, every=1, kinds=kinds, engine=engine,
                          plugins=[PoisonParamGrad("0.weight", {0}, value)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            h.run(steps=2)
        logged.append([h.scalars(f"histogram/update_ratio/{p}").values for p in PARAMS])
    with_histograms, alone = (np.array(v, dtype=np.float64) for v in logged)
    assert np.isnan(with_histograms[0, 1])  # the first layer's weights had the value
    np.testing.assert_allclose(with_histograms, alone, rtol=1e-12)  # (NaN where NaN)
