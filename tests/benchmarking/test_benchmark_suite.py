"""The benchmark suite's smoke mode, so the benchmarks never rot: every workload runs a few
steps and checks that gradlog, the numpy floor and (when installed) PyTorch compute the same
losses. Timing targets are never asserted in tests."""

from __future__ import annotations

import json
import tempfile

import numpy as np
import pytest

from benchmarks import run as bench

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "workloads", ["W1", "W2,W4c", "W3", "W7", "W7c", "W8", "W4b,W4d,W4e,W4f,W4g", "W9", "W10",
                  "W11,W12"]
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
    err = capsys.readouterr().err
    assert "unknown workload(s): W99" in err and "W7 torch-watch" in err


def test_every_workload_has_its_own_name():
    names = [w.name for w in bench.WORKLOADS.values()]
    assert len(set(names)) == len(names) and all(names)
    assert not set(names) & set(bench.WORKLOADS)


def test_a_workload_is_chosen_by_name_and_printed_with_it(tmp_path, capsys):
    out = tmp_path / "results.json"
    assert bench.main(["--quick", "--only", "dispatch", "--json", str(out)]) == 0
    assert "\n== W3 dispatch\n" in capsys.readouterr().out
    assert list(json.loads(out.read_text())["results"]) == ["W3"]


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


def test_bootstrap_interval_resamples_whole_rounds():
    import statistics

    from benchmarks.common import bootstrap_interval

    def ratio(runs):
        (samples,) = runs
        return float(statistics.median(samples["b"]) / statistics.median(samples["a"]))

    # the machine slows every contender alike from round to round: resampled rounds keep b's
    # blocks paired with a's, so the ratio stays exact
    drift = [1.0, 3.0, 2.0, 5.0, 4.0]
    paired = {"a": drift, "b": [1.1 * x for x in drift]}
    low, high = bootstrap_interval([paired], ratio)
    assert low == pytest.approx(1.1) and high == pytest.approx(1.1)
    # noise of its own in b: the interval holds the run's ratio and has a width
    rng = np.random.default_rng(1)
    noisy = {"a": [1.0] * 40, "b": list(1.1 + 0.05 * rng.standard_normal(40))}
    low, high = bootstrap_interval([noisy], ratio, level=0.9)
    assert low < ratio([noisy]) < high
    assert 0.005 < high - low < 0.08
    # more rounds of the same noise: a narrower interval
    more = {"a": [1.0] * 400, "b": list(1.1 + 0.05 * rng.standard_normal(400))}
    low_more, high_more = bootstrap_interval([more], ratio, level=0.9)
    assert high_more - low_more < (high - low) / 2


def test_w7_pools_runs_as_their_overheads_added_up(tmp_path):
    from benchmarks.torch_watch import pooled

    def run(bare, ours, theirs, noise):
        blocks = {"bare": [bare] * 30, "bare again": [bare] * 30,
                  "histogram+grad-norm": list(ours * (1 + np.array(noise))),
                  "weight+grad histograms+grad-norm": [ours] * 30,
                  "wandb.watch": [theirs] * 30}
        return {"results": {"W7": {"block_seconds": blocks}}}

    quiet = [0.0] * 30
    noisy = list(0.004 * np.random.default_rng(2).standard_normal(30))
    paths = []
    # the second run's machine is twice as slow: each run's overheads are its own ratios
    for i, blocks in enumerate([run(1.0, 1.02, 1.04, quiet), run(2.0, 2.02, 2.12, noisy)]):
        paths.append(tmp_path / f"w7-{i}.json")
        paths[-1].write_text(json.dumps(blocks))
    out = pooled([str(p) for p in paths])
    each = out["weight+grad histograms+grad-norm overhead / wandb's, each run"]
    assert each == pytest.approx([0.5, 1 / 6])
    assert out["weight+grad histograms+grad-norm overhead / wandb's, pooled"] == pytest.approx(
        (0.02 + 0.01) / (0.04 + 0.06))
    low, high = out["weight+grad histograms+grad-norm overhead / wandb's, pooled, 90% interval"]
    assert low == pytest.approx(0.3) and high == pytest.approx(0.3)  # no noise, no width
    # noise in one run's blocks widens the pooled interval around the pooled value
    low, high = out["histogram+grad-norm overhead / wandb's, pooled, 90% interval"]
    assert low < out["histogram+grad-norm overhead / wandb's, pooled"] < high
    assert high - low > 0.01


def test_w7_pairs_each_block_with_the_bare_blocks_of_its_round(tmp_path):
    from benchmarks.torch_watch import pooled

    # the machine's speed drifts by +-20% from round to round, each block has 0.3% noise of
    # its own: only a ratio taken within each round sees the 2%, 1% and 4% overheads (a ratio
    # of each contender's median over all rounds gives 0.41 and 0.18 on these blocks)
    rng = np.random.default_rng(3)
    drift = rng.uniform(0.8, 1.25, 60)

    def blocks(factor):
        return list(factor * drift * (1 + 0.003 * rng.standard_normal(60)))

    run = {"bare": blocks(1.0), "bare again": blocks(1.0), "histogram+grad-norm": blocks(1.02),
           "weight+grad histograms+grad-norm": blocks(1.01), "wandb.watch": blocks(1.04)}
    path = tmp_path / "w7.json"
    path.write_text(json.dumps({"results": {"W7": {"block_seconds": run}}}))
    out = pooled([str(path)])
    assert out["histogram+grad-norm overhead / wandb's, pooled"] == pytest.approx(0.5, abs=0.03)
    assert out["weight+grad histograms+grad-norm overhead / wandb's, pooled"] == pytest.approx(
        0.25, abs=0.03)


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


def test_w7_on_cuda_without_cuda_says_so_in_one_line_and_skips_the_row(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: W7 runs on it")
    out = tmp_path / "results.json"
    assert bench.main(["--quick", "--only", "W7", "--device", "cuda", "--json", str(out)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("W7")]
    assert err == ["W7: --device cuda: CUDA is not available here (torch.cuda.is_available() "
                   "is False); run it on a machine with a GPU, or with --device cpu"]
    results = json.loads(out.read_text())
    assert results["results"]["W7"] == {"skipped": err[0][len("W7: "):]}
    assert results["meta"]["device"] == "cuda"


def test_w7_on_cpu_is_the_default(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    found = []
    for extra in ([], ["--device", "cpu"]):
        out = tmp_path / "results.json"
        assert bench.main(["--quick", "--only", "W7", "--json", str(out), *extra]) == 0
        found.append(json.loads(out.read_text())["results"]["W7"])
    assert found[0] == found[1] and len(found[0]["checked"]["bare"]) == 5


def test_the_device_clock_waits_for_the_gpu_before_reading_the_time():
    from benchmarks.common import device_clock

    calls = []

    class Cuda:
        @staticmethod
        def synchronize():
            calls.append("synchronize")

    class FakeTorch:
        cuda = Cuda

    import time
    assert device_clock(FakeTorch, "cpu") is time.perf_counter
    clock = device_clock(FakeTorch, "cuda")
    before = time.perf_counter()
    assert clock() >= before and calls == ["synchronize"]


def test_doctor_timing_reports_the_bare_again_ratio_beside_the_doctors(tmp_path, monkeypatch):
    # a few steps of the timed mode: the second bare contender is timed like the others and
    # its ratio (the run's noise) is reported for each engine
    from benchmarks import doctor

    monkeypatch.setattr(doctor, "PER_BLOCK", 3)
    monkeypatch.setattr(doctor, "COPIES", 1)
    out = doctor.live(quick=False, blocks=2, logdir=str(tmp_path))
    engines = [name for name in ("W1", "W7") if f"{name} doctor/bare" in out]
    assert "W1" in engines
    for name in engines:
        for key in (f"{name} doctor/bare", f"{name} bare again/bare"):
            assert np.isfinite(out[key]) and out[key] > 0, (key, out[key])


def _w10(monkeypatch, scratch) -> dict:
    pytest.importorskip("lightning")
    from benchmarks import lightning

    monkeypatch.setattr(lightning, "PER_BLOCK", 5)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return lightning.run(quick=False, blocks=1)["W10"]


def test_w10_without_wandb_says_so_and_times_the_rest(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)  # (as if not installed)
    out = _w10(monkeypatch, tmp_path)
    assert out["wandb watch"] == "wandb not installed: the WandbLogger.watch row is not measured"
    assert not [key for key in out if key.startswith("wandb watch/")]
    assert np.isfinite(out["gradlog callback/bare"]) and out["gradlog callback/bare"] > 0


def test_w10_times_wandb_watch_offline_writing_only_in_its_temporary_directory(
        tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    import os

    home, scratch = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    scratch.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = _w10(monkeypatch, scratch)
    for key in ("wandb watch/bare", "wandb watch/bare (process cpu)"):
        assert np.isfinite(out[key]) and out[key] > 0, (key, out[key])
    assert "gradlog callback overhead / wandb watch's" in out and "wandb watch" not in out
    assert list(home.iterdir()) == [] and list(scratch.iterdir()) == []
    assert "WANDB_MODE" not in os.environ  # (the environment as it was)
