"""``gradlog train`` without ``--logdir``: PyTorch's default directory name
(``runs/<Mon DD_HH-MM-SS>_<host>``), taken atomically, so runs started in the same second (a
sweep launched from a shell loop) never share one."""

from __future__ import annotations

import threading

from conftest import TINY

from gradlog.cli import main
from gradlog.train import runs


def _args(config) -> list[str]:
    return ["train", "--no-default-plugins", "--epochs", "1", "--batch-size", "32",
            "--config", str(config), "-q"]


def test_runs_started_in_the_same_second_get_a_directory_each(runner, tmp_path, monkeypatch):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    monkeypatch.chdir(tmp_path)
    same = "runs/Dec01_17-00-00_host"  # what both would be named in the same second
    monkeypatch.setattr(runs, "default_run_dir", lambda root="runs": same)
    for _ in range(2):
        result = runner.invoke(main, _args(config))
        assert result.exit_code == 0, result.output
    made = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert made == ["Dec01_17-00-00_host", "Dec01_17-00-00_host-1"]
    for name in made:
        assert (tmp_path / "runs" / name / runs.RUN_TOML).is_file()
        assert runs.has_events(str(tmp_path / "runs" / name))


def test_a_default_run_that_fails_before_its_first_step_leaves_no_directory(
        runner, tmp_path, monkeypatch):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    monkeypatch.chdir(tmp_path)
    # the plugin's setup finds no such layer: after the directory was claimed
    result = runner.invoke(main, _args(config) + ["-p", "gradcam:layer=nowhere"])
    assert result.exit_code == 2 and "nowhere" in result.output, result.output
    assert list((tmp_path / "runs").iterdir()) == []


def test_claiming_is_atomic_between_threads(tmp_path):
    path = str(tmp_path / "runs" / "same")
    taken: list[str] = []
    threads = [threading.Thread(target=lambda: taken.append(runs.claim_new_dir(path)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == sorted([path] + [f"{path}-{n}" for n in range(1, 8)])
