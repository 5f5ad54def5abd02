"""The benchmark suite's smoke mode, so the benchmarks never rot: every workload runs a few
steps and checks that gradlog, the numpy floor and (when installed) PyTorch compute the same
losses. Timing targets are never asserted in tests."""

from __future__ import annotations

import json
import tempfile

import pytest

from benchmarks import run as bench

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "workloads", ["W1", "W2,W4c", "W3", "W7", "W8", "W4b,W4d,W4e,W4f,W4g"]
)
def test_quick_mode_checks_every_contender(workloads, tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the workloads log
    out = tmp_path / "results.json"
    assert bench.main(["--quick", "--only", workloads, "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    for name in workloads.split(","):
        assert name in results
    # every log directory removed (torch may keep its own compile cache there)
    assert [p.name for p in scratch.iterdir() if p.name.startswith("gradlog")] == []


def test_quick_memory_measurements_run(tmp_path):
    out = tmp_path / "results.json"
    assert bench.main(["--quick", "--only", "W6", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert results["import"]["rss_mb"] > 0 and not results["import"]["tensorboard_imported"]
    flat = results["flat_rss"]
    assert len(flat["samples_mb"]) == 3 and flat["steps"] == 300  # enough to see a growth
    assert flat["growth_after_warmup_mb"] == flat["samples_mb"][2] - flat["samples_mb"][1]


def test_unknown_workload_is_refused(capsys):
    assert bench.main(["--quick", "--only", "W99"]) == 2
    assert "unknown workload" in capsys.readouterr().err


def test_copies_take_turns_a_block_each_and_each_ends_its_own_block():
    from benchmarks.common import Copies, interleaved
    calls: list[str] = []
    copies = Copies([lambda: calls.append("a"), lambda: calls.append("b")],
                    [lambda: calls.append("a|"), lambda: calls.append("b|")])
    interleaved({"x": copies}, blocks=3, per_block=2, warmup=0,
                after_block={"x": copies.end_block})
    assert calls == ["a", "a", "a|", "b", "b", "b|", "a", "a", "a|"]


def test_interleaved_copies_warms_every_copy_up_then_times_them_in_turn():
    from benchmarks.common import Copies, interleaved_copies
    calls: list[str] = []
    copies = Copies([lambda: calls.append("a"), lambda: calls.append("b")],
                    [lambda: calls.append("a|"), lambda: calls.append("b|")])
    t = interleaved_copies({"x": copies}, blocks=3, per_block=2)
    warm_up, timed = calls[:6], calls[6:]
    assert warm_up == ["a", "a", "a|", "b", "b", "b|"]
    assert timed == ["a", "a", "a|", "b", "b", "b|", "a", "a", "a|"]
    assert len(t["x"].samples) == 3


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_balanced_orders_put_each_contender_everywhere_and_after_every_other_equally(n):
    from collections import Counter

    from benchmarks.common import balanced_orders
    rows = balanced_orders(n)
    assert all(sorted(row) == list(range(n)) for row in rows)
    positions = Counter((row[i], i) for row in rows for i in range(n))
    assert len(positions) == n * n and len(set(positions.values())) == 1
    pairs = Counter(pair for row in rows for pair in zip(row[:-1], row[1:]))
    assert len(pairs) == n * (n - 1) and len(set(pairs.values())) <= 1
