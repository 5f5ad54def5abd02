"""The offline doctor reads what writers wrote: scalars old- and new-style, texts, a resumed
run's purge, other writers' tag names; and the findings' schema and table."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gradlog.doctor import (
    Finding,
    Trace,
    diagnose_logdir,
    format_table,
    read_trace,
    run_directories,
    to_json,
)
from gradlog.doctor.logdir import DoctorError
from gradlog.tensorboard import SummaryWriter


def test_scalars_old_and_new_style_and_texts_are_read_exactly(tmp_path):
    with SummaryWriter(tmp_path) as w:
        for step in range(5):
            w.add_scalar("train/loss", 1.0 / (step + 1), step)
            w.add_scalar("grad-norm/global", 0.5 * step, step, new_style=True)
        w.add_scalar("train/loss", float("nan"), 5)
        w.add_text("doctor/nonfinite", '{"x": 1}', 3)
        w.add_histogram("histogram/weight/w", np.arange(10.0), 0)
    trace = read_trace(str(tmp_path))
    assert trace.scalars["train/loss"].keys() == set(range(6))
    assert trace.scalars["train/loss"][3] == np.float32(0.25)
    assert math.isnan(trace.scalars["train/loss"][5])
    assert trace.scalars["grad-norm/global"] == {s: np.float32(0.5 * s) for s in range(5)}
    assert trace.texts == {"doctor/nonfinite": {3: '{"x": 1}'}}
    assert "histogram/weight/w" not in trace.scalars


def test_resumed_run_hides_the_earlier_session_from_the_purge_step(tmp_path):
    with SummaryWriter(tmp_path) as w:
        for step in range(10):
            w.add_scalar("train/loss", 1.0, step)
    with SummaryWriter(tmp_path, purge_step=6, filename_suffix=".b") as w:
        for step in range(6, 8):
            w.add_scalar("train/loss", 2.0, step)
    points = read_trace(str(tmp_path)).scalars["train/loss"]
    assert points == {**{s: 1.0 for s in range(6)}, 6: 2.0, 7: 2.0}


def test_statistic_prefers_the_doctors_own_tag_and_knows_other_writers():
    trace = Trace()
    trace.add_scalar("grad-norm/fc", 0, 1.0)
    trace.add_scalar("doctor/grad_norm/fc", 0, 2.0)
    trace.add_scalar("grad_2.0_norm/conv.weight", 0, 3.0)   # Lightning's grad_norm()
    trace.add_scalar("grad-norm/global", 0, 4.0)
    norms = trace.statistic("grad_norm")
    assert {k: v.values.tolist() for k, v in norms.items()} == {"fc": [2.0],
                                                                 "conv.weight": [3.0]}
    assert trace.statistic("grad_norm_global")[""].values.tolist() == [4.0]


def test_series_are_sorted_by_step():
    trace = Trace()
    for step in (5, 1, 3):
        trace.add_scalar("train/loss", step, float(step))
    s = trace.statistic("loss")[""]
    assert s.steps.tolist() == [1, 3, 5] and s.values.tolist() == [1.0, 3.0, 5.0]


def test_series_asked_between_points_equal_the_points_so_far():
    # the live doctor asks at every check; in between: points after the last, a step again
    # (replaced), an earlier step, a new tag, a purge
    rng = np.random.default_rng(0)
    trace, asked = Trace(), 0
    moves = [(int(s), 0) for s in range(0, 60, 3)] + [(9, 1), (4, 1), (70, 0), (71, 0),
                                                      (65, 2), (80, 0), (30, 3), (81, 0)]
    for step, kind in moves:
        if kind == 3:
            trace.purge(step)
        else:
            tag = "doctor/grad_norm/fc" if kind != 2 else "doctor/grad_norm/conv"
            trace.add_scalar(tag, step, float(rng.standard_normal()))
        if rng.random() < 0.5:
            asked += 1
            for layer, s in trace.statistic("grad_norm").items():
                points = trace.scalars[f"doctor/grad_norm/{layer}"]
                assert s.steps.tolist() == sorted(points)
                assert s.values.tolist() == [points[k] for k in sorted(points)]
                assert not s.values.flags.writeable  # (kept between checks)
    assert asked > 5
    assert trace.statistic("grad_norm")["fc"].steps.tolist()[-3:] == [24, 27, 81]
    for step in (90, 85, 95):  # (an earlier step between two later ones, not asked between)
        trace.add_scalar("doctor/grad_norm/fc", step, float(step))
    assert trace.statistic("grad_norm")["fc"].steps.tolist()[-5:] == [27, 81, 85, 90, 95]


def test_missing_or_empty_logdir_is_a_clear_error(tmp_path):
    with pytest.raises(DoctorError, match="no such directory"):
        run_directories(str(tmp_path / "nope"))
    with pytest.raises(DoctorError, match="no event files"):
        run_directories(str(tmp_path))


def test_each_run_directory_is_diagnosed(tmp_path):
    for name in ("a", "b"):
        with SummaryWriter(tmp_path / name) as w:
            w.add_scalar("train/loss", 1.0, 0)
    assert sorted(diagnose_logdir(str(tmp_path))) == [str(tmp_path / "a"),
                                                      str(tmp_path / "b")]


def test_finding_kind_is_checked_and_json_has_the_schema():
    with pytest.raises(ValueError, match="kind must be one of"):
        Finding("nan", [], 0, {}, "x")
    finding = Finding("nonfinite", ["fc"], 7, {"loss": float("nan"), "norm": [float("inf")]},
                      "NaN", "lower the learning rate")
    data = json.loads(to_json([finding]))
    assert data == {"findings": [{"kind": "nonfinite", "layers": ["fc"], "first_step": 7,
                                  "evidence": {"loss": "nan", "norm": ["inf"]},
                                  "message": "NaN", "advice": "lower the learning rate"}]}


def test_table_and_console_line():
    finding = Finding("dead_units", [str(i) for i in range(6)], 40, {}, "half are dead",
                      "try LeakyReLU")
    table = format_table([finding])
    assert table.splitlines()[0].split() == ["kind", "step", "layers"]
    assert "dead_units  40" in table and "(+2 more)" in table and "try: try LeakyReLU" in table
    assert finding.line() == ("doctor: dead_units in 0, 1, 2, 3, (+2 more) since step 40: "
                              "half are dead")
    assert "no findings" in format_table([])
