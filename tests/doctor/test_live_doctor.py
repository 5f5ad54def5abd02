"""The ``doctor`` plugin: the same rules, live, on the labelled runs; one console line per
finding, the Text tab, ``action=stop``, thresholds as options, nothing left registered, and
the training trajectory unchanged."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from doctor_runs import (
    HEALTHY,
    PATHOLOGIES,
    cases,
    healthy_mlp,
    lr_100x_too_high,
    mlp,
    teacher_data,
)
from gradlog_plugins.doctor import Doctor

import gradlog as gl
from gradlog.doctor import diagnose, read_trace

LIVE = ("doctor:every=5",)





def _run(lib, build, logdir, plugins=LIVE):
    lib.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return build(lib, logdir, plugins=plugins)


@pytest.mark.parametrize(("engine", "build"), cases(PATHOLOGIES), indirect=["engine"])
def test_live_doctor_finds_each_pathology(engine, build, tmp_path, capsys):
    expected = _run(engine, build, tmp_path)
    findings = {f.kind: f for f in diagnose(read_trace(str(tmp_path)))}
    found = findings[expected.kind]
    assert set(expected.layers) <= set(found.layers), found.to_dict()
    assert not set(expected.absent) & set(found.layers), found.to_dict()
    assert abs(found.first_step - expected.first_step) <= expected.tolerance, found.to_dict()
    if expected.kind == "nonfinite":  # the origin, found by hooks, is one module
        assert found.layers == list(expected.layers), found.to_dict()
    lines = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith("doctor: ")]
    assert any(line.startswith(f"doctor: {expected.kind}") for line in lines), lines
    assert len(lines) == len({line.split()[1] for line in lines})  # each kind once


@pytest.mark.parametrize(("engine", "build"), cases(HEALTHY), indirect=["engine"])
def test_live_doctor_is_silent_on_healthy_runs_at_its_default_cadence(engine, build, tmp_path,
                                                                     capsys):
    _run(engine, build, tmp_path, plugins=("doctor",))
    captured = capsys.readouterr()
    assert "doctor:" not in captured.err and "doctor summary: no findings" in captured.out
    trace = read_trace(str(tmp_path))
    assert "doctor/findings" not in trace.texts
    assert diagnose(trace) == []
    assert any(tag.startswith("doctor/grad_norm/") for tag in trace.scalars)


def test_findings_go_to_the_text_tab_once_each_and_into_the_summary(tmp_path, capsys):
    _run(gl, lr_100x_too_high, tmp_path)
    texts = read_trace(str(tmp_path)).texts["doctor/findings"]
    kinds = [part.split("**")[1] for text in texts.values() for part in text.split("\n\n- ")]
    assert "exploding_gradient" in kinds and len(kinds) == len(set(kinds))
    summary = capsys.readouterr().out.split("doctor summary: ")[1].splitlines()
    assert summary[0] == f"{len(kinds)} findings (gradlog doctor LOGDIR for details)"
    assert sorted(line.split()[0] for line in summary[1:]) == sorted(kinds)


def test_action_stop_ends_the_run_cleanly(tmp_path):
    _run(gl, lr_100x_too_high, tmp_path, plugins=("doctor:every=5,action=stop",))
    losses = read_trace(str(tmp_path)).scalars["train/loss"]
    assert max(losses) < 50  # stopped at the first check after the first finding, not 200


def test_stop_on_one_kind_and_thresholds_as_options(tmp_path):
    doctor = Doctor(every=5, stop_on=["nonfinite"],
                    thresholds={"large_update_ratio": {"above": 1e9}})
    _run(gl, lr_100x_too_high, tmp_path, plugins=(doctor,))
    assert "large_update_ratio" not in doctor.findings
    assert "nonfinite" in doctor.findings
    assert max(read_trace(str(tmp_path)).scalars["train/loss"]) < 50
    with pytest.raises(ValueError, match="no finding kind 'nan'"):
        Doctor(stop_on=["nan"])
    with pytest.raises(ValueError, match="no threshold 'x'"):
        Doctor(thresholds={"dead_units": {"x": 1}})


def test_hooks_are_removed_and_training_is_unchanged(tmp_path):
    data = teacher_data(256)
    losses = []
    for plugins in ((), ("doctor:every=1,check_every=1",)):
        gl.manual_seed(0)
        model = mlp(gl, [8, 16, 3])
        opt = gl.optim.SGD(model.parameters(), lr=0.1)
        x, y = gl.from_numpy(data[0]), gl.from_numpy(data[1])
        with gl.watch(model, opt, logdir=str(tmp_path / str(len(plugins))), plugins=plugins,
                      strict=True) as run:
            out = []
            for step in range(20):
                opt.zero_grad()
                loss = gl.nn.functional.cross_entropy(model(x[step * 8:step * 8 + 8]),
                                                      y[step * 8:step * 8 + 8])
                loss.backward()
                opt.step()
                run.log_scalar("train/loss", loss)
                out.append(loss.item())
        assert run.handles_left() == 0
        losses.append(out)
    np.testing.assert_array_equal(losses[0], losses[1])


def test_healthy_run_builder_signature_is_shared():
    assert HEALTHY["healthy_mlp"][1] is healthy_mlp


def test_state_dict_keeps_what_was_reported(tmp_path, capsys):
    first = Doctor(every=5)
    _run(gl, lr_100x_too_high, tmp_path / "a", plugins=(first,))
    resumed = Doctor(every=5)
    resumed.load_state_dict(first.state_dict())
    assert resumed.findings.keys() == first.findings.keys()
    capsys.readouterr()
    _run(gl, lr_100x_too_high, tmp_path / "b", plugins=(resumed,))
    assert not [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("doctor: ")]  # nothing reported twice


def _small_mlp(lib, rows: int, lr: float):
    """An 8-16-3 MLP, its SGD optimizer and ``rows`` rows of the teacher's data."""
    lib.manual_seed(0)
    data = teacher_data(rows)
    model = mlp(lib, [8, 16, 3])
    return (model, lib.optim.SGD(model.parameters(), lr=lr),
            lib.from_numpy(data[0]), lib.from_numpy(data[1]))


@pytest.mark.parametrize("engine", ["gradlog", "torch"], indirect=True)
def test_nonfinite_is_found_in_steps_given_a_closure(engine, tmp_path):
    # the watch moves into backward from the first step given a closure on (its gradients
    # come inside the step): a NaN from step 6 on is found at step 6
    lib = engine
    model, opt, x, y = _small_mlp(lib, 256, lr=0.1)
    with gl.watch(model, opt, logdir=str(tmp_path), plugins=("doctor:every=5",)):
        for step in range(12):
            def closure(step=step):
                opt.zero_grad()
                loss = lib.nn.functional.cross_entropy(model(x[step * 8:step * 8 + 8]),
                                                       y[step * 8:step * 8 + 8])
                if step >= 6:
                    loss = loss * float("nan")
                loss.backward()
                return loss
            opt.step(closure)
    # found inside step 6's closure, it is reported there, before step 6's update: the
    # origin search sees the weights the step used (finite), so the NaN began after the
    # forward pass (in the loss), not in a module fed NaN weights by the update
    found = {f.kind: f for f in diagnose(read_trace(str(tmp_path)))}["nonfinite"]
    assert found.first_step == 6
    assert found.evidence["where"] == "backward"


@pytest.mark.parametrize("engine", ["gradlog", "torch"], indirect=True)
def test_large_finite_gradients_are_not_taken_for_nan(engine, tmp_path):
    # gradients near 1e25 are finite, but their squares overflow float32: the per-step watch
    # asks whether every value is finite, not whether a norm is (steps 1-3 measure nothing)
    lib = engine
    model, opt, x, y = _small_mlp(lib, 64, lr=0.0)
    doctor = Doctor(every=100, check_every=1)
    with gl.watch(model, opt, logdir=str(tmp_path), plugins=(doctor,)):
        for step in range(4):
            opt.zero_grad()
            loss = lib.nn.functional.cross_entropy(model(x[step * 8:step * 8 + 8]),
                                                   y[step * 8:step * 8 + 8])
            (loss * (1e25 if step else 1.0)).backward()
            assert np.isfinite(model[0].bias.grad.numpy()).all()
            opt.step()
    assert "nonfinite" not in doctor.findings
    assert "doctor/nonfinite" not in read_trace(str(tmp_path)).texts


def test_measured_copies_are_freed_once_written_not_at_the_next_check(tmp_path):
    # every step measures (a copy of the 1 MiB of weights each); the rules look only at the
    # end: the copies must go once the writer's thread has the numbers, not pile up
    import tracemalloc

    gl.manual_seed(0)
    model = mlp(gl, [512, 512, 3])
    opt = gl.optim.SGD(model.parameters(), lr=0.01)
    x = gl.from_numpy(np.random.default_rng(0).normal(size=(4, 512)).astype(np.float32))
    y = gl.from_numpy(np.array([0, 1, 2, 0]))
    held = []
    with gl.watch(model, opt, logdir=str(tmp_path),
                  plugins=(Doctor(every=1, check_every=10_000),)) as run:
        tracemalloc.start()
        try:
            for step in range(24):
                opt.zero_grad()
                gl.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                if step % 8 == 7:
                    run.writer.flush()
                    held.append(tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
    # (with the copies kept until the check: about 2 MiB more for each of 8 steps)
    assert held[2] - held[0] < 2**20, held


def test_module_norms_of_exploding_float64_gradients_add_up_without_an_overflow_error():
    # (squares above 1e308 each or in sum: the doctor measures exactly when gradients explode)
    from gradlog_plugins.doctor import _l2
    assert _l2([3e154, 4e154]) == pytest.approx(5e154, rel=1e-15)
    assert _l2([1e300, 1e300]) == pytest.approx(2 ** 0.5 * 1e300, rel=1e-15)
    assert _l2([1.0, float("inf")]) == float("inf")
    assert np.isnan(_l2([float("inf"), float("nan")])) and _l2([]) == 0.0
