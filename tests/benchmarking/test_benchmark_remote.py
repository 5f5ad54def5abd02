"""Smoke test of benchmarks/remote.py: --quick runs both contenders once on tiny inputs and
checks that each wrote every event (the timings themselves are not asserted)."""

import importlib.util
import os
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_remote_benchmark_quick_run(tmp_path, capsys, monkeypatch):
    for module in ("fsspec", "s3fs", "moto", "boto3"):  # the remote extra and its test server
        pytest.importorskip(module)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    spec = importlib.util.spec_from_file_location(
        "benchmark_remote", os.path.join(ROOT, "benchmarks", "remote.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main(["--quick", "--json", str(tmp_path / "results.json")])
    assert results["read_back"] == {"local": 200, "s3": 200}
    assert set(results["events_per_sec"]) == {"local", "s3"}
    assert (tmp_path / "results.json").exists()
    assert "W5r remote-scalars: add_scalar throughput" in capsys.readouterr().out
    assert [p.name for p in scratch.iterdir()] == []  # the server's files removed
