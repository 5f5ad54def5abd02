"""Smoke test of benchmarks/writer.py: its --quick mode runs every contender once on tiny inputs
and checks that each wrote what it was given (the timings themselves are not asserted)."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_writer_benchmark_quick_run(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location(
        "benchmark_writer", os.path.join(ROOT, "benchmarks", "writer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main(["--quick", "--json", str(tmp_path / "results.json")])
    assert {"gradlog", "bare"} <= set(results["scalars"]["events_per_sec"])
    assert {"gradlog", "np.histogram(30)"} <= set(results["histogram"]["seconds"])
    assert "gradlog" in results["image"]["seconds"]
    assert {t["target"] for t in results["targets"]} >= {
        "scalars: gradlog / bare-writer throughput",
        "histogram: gradlog / np.histogram(x, 30) time"}
    assert (tmp_path / "results.json").exists()
    assert "W5 scalars" in capsys.readouterr().out
