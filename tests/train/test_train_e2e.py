"""``gradlog train`` end to end on tiny configurations: what it logs, exit codes, refusing a
used run directory, checkpoints, and resuming with exactly the losses of an uninterrupted
run (after a clean stop and after SIGINT/SIGTERM/SIGKILL)."""

from __future__ import annotations

import numpy as np
import pytest
from train_helpers import TINY, gradlog_train, scalars

pytestmark = pytest.mark.slow


def _losses(run_dir) -> dict[int, float]:
    return dict(scalars(str(run_dir), "train/loss"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Two epochs without interruption: the reference every resumed run must match."""
    root = tmp_path_factory.mktemp("full")
    config = root / "tiny.toml"
    config.write_text(TINY)
    run_dir = root / "run"
    result = gradlog_train(["--no-default-plugins", "--epochs", "2", "--logdir", str(run_dir),
                            "--config", str(config), "--quiet"])
    assert result.returncode == 0, result.stderr
    return run_dir, result


def test_train_logs_metrics_config_and_checkpoints(uninterrupted):
    run_dir, result = uninterrupted
    assert "tensorboard --logdir" in result.stdout
    steps_per_epoch = 4  # 256 images / batch 64
    losses = scalars(str(run_dir), "train/loss")
    assert [s for s, _ in losses] == list(range(2 * steps_per_epoch))
    assert all(np.isfinite(v) for _, v in losses)
    val = scalars(str(run_dir), "val/acc")
    assert [s for s, _ in val] == [4, 8] and all(0.0 <= v <= 1.0 for _, v in val)
    assert [s for s, _ in scalars(str(run_dir), "train/lr")] == list(range(8))
    names = sorted(p.name for p in run_dir.iterdir())
    assert "checkpoint-00000008.npz" in names and "checkpoint-00000004.npz" in names


def test_refuses_a_directory_that_holds_a_run(tmp_path, tiny_config):
    run_dir = tmp_path / "run"
    args = ["--no-default-plugins", "--epochs", "1", "--logdir", str(run_dir),
            "--config", tiny_config, "--quiet"]
    assert gradlog_train(args).returncode == 0
    again = gradlog_train(args)
    assert again.returncode == 2
    assert f"--resume {run_dir}" in again.stderr and "Traceback" not in again.stderr


def test_resume_after_a_finished_epoch_continues_identically(tmp_path, tiny_config,
                                                            test_plugins, uninterrupted):
    """Killed right after the epoch-end checkpoint, before the next batch starts."""
    full, part = uninterrupted[0], tmp_path / "part"
    base = ["--no-default-plugins", "--config", tiny_config, "--quiet", "--epochs", "2"]
    killed = gradlog_train([*base, "--logdir", str(part), "-p",
                            "killer:at_step=4,signal=KILL,event=on_batch_start"], test_plugins)
    assert killed.returncode == -9
    assert (part / "checkpoint-00000004.npz").exists()
    resumed = gradlog_train([*base, "--resume", str(part)])
    assert resumed.returncode == 0, resumed.stderr
    assert _losses(part) == _losses(full)


@pytest.mark.parametrize("sig, code", [("INT", 130), ("TERM", 143)])
def test_signal_saves_a_checkpoint_and_resume_matches(tmp_path, tiny_config, test_plugins,
                                                      sig, code, uninterrupted):
    full, part = uninterrupted[0], tmp_path / "part"
    base = ["--no-default-plugins", "--config", tiny_config, "--quiet", "--epochs", "2"]
    killed = gradlog_train([*base, "--logdir", str(part), "-p",
                            f"killer:at_step=5,signal={sig}"], test_plugins)
    assert killed.returncode == code, killed.stderr
    assert "checkpoint saved" in killed.stderr
    resumed = gradlog_train([*base, "--resume", str(part)])
    assert resumed.returncode == 0, resumed.stderr
    assert _losses(part) == _losses(full)


def test_sigkill_loses_nothing_before_the_checkpoint(tmp_path, tiny_config, test_plugins,
                                                     uninterrupted):
    full, part = uninterrupted[0], tmp_path / "part"
    base = ["--no-default-plugins", "--config", tiny_config, "--quiet", "--epochs", "2"]
    killed = gradlog_train([*base, "--logdir", str(part), "-p", "killer:at_step=6,signal=KILL"],
                           test_plugins)
    assert killed.returncode == -9
    resumed = gradlog_train([*base, "--resume", str(part)])
    assert resumed.returncode == 0, resumed.stderr
    assert _losses(part) == _losses(full)  # each step exactly once, same values


def test_a_failing_mutator_exits_1_naming_the_plugin(tmp_path, tiny_config, test_plugins):
    result = gradlog_train(["--no-default-plugins", "--config", tiny_config, "--quiet",
                            "--logdir", str(tmp_path / "run"), "-p", "explodes"], test_plugins)
    assert result.returncode == 1
    first = result.stderr.splitlines()[0]
    assert "plugin 'explodes' failed in on_before_optimizer_step at step 2" in first
    assert "ZeroDivisionError: exploded on purpose" in result.stderr
    assert _losses(tmp_path / "run")  # what was logged before is readable


def test_user_errors_exit_2_with_one_line(tmp_path, tiny_config):
    cases = [
        (["-p", "no-such-plugin"], "unknown plugin 'no-such-plugin'"),
        (["-p", "grad-clip:max_norm"], "expected key=value"),
        (["nonexistent_file.py"], "example file not found"),
        (["--config", str(tmp_path / "missing.toml")], "config file not found"),
    ]
    for args, fragment in cases:
        result = gradlog_train(["--no-default-plugins", "--logdir", str(tmp_path / "x"),
                                *args])
        assert result.returncode == 2, (args, result.stderr)
        assert fragment in result.stderr and "Traceback" not in result.stderr, result.stderr
