"""The doctor's measured quality: on every labelled run (tests/doctor/doctor_runs.py), each
mistake is found with the right kind, layers and first step, and the healthy runs get no
finding at all. Offline, from what gradlog's plugins log."""

from __future__ import annotations

import warnings

import pytest
from doctor_runs import HEALTHY, PATHOLOGIES, cases

from gradlog.doctor import diagnose, read_trace


def _findings(lib, build, logdir):
    lib.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the pathologies' own NaN warnings
        expected = build(lib, logdir)
    return expected, diagnose(read_trace(str(logdir)))


@pytest.mark.parametrize(("engine", "build"), cases(PATHOLOGIES), indirect=["engine"])
def test_pathology_found_with_kind_layers_and_first_step(engine, build, tmp_path):
    expected, findings = _findings(engine, build, tmp_path)
    by_kind = {f.kind: f for f in findings}
    assert expected.kind in by_kind, [f.to_dict() for f in findings]
    found = by_kind[expected.kind]
    assert set(expected.layers) <= set(found.layers), found.to_dict()
    assert not set(expected.absent) & set(found.layers), found.to_dict()
    assert abs(found.first_step - expected.first_step) <= expected.tolerance, found.to_dict()
    assert found.message and found.advice


@pytest.mark.parametrize(("engine", "build"), cases(HEALTHY), indirect=["engine"])
def test_healthy_run_has_no_finding(engine, build, tmp_path):
    expected, findings = _findings(engine, build, tmp_path)
    assert expected is None
    assert [f.to_dict() for f in findings] == []
