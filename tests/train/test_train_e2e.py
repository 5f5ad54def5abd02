"""``gradlog train`` end to end on tiny configurations: what it logs, exit codes, refusing a
used run directory, checkpoints, and ``--resume DIR``: it restores the run's whole recorded
configuration (nothing needs repeating), accepts flags given again with the same value,
refuses others naming key, recorded and given value, extends a run with a larger ``--epochs``,
says a finished run is finished and writes nothing, starts over a run that died before its
first checkpoint, passes over a damaged newest checkpoint, and always ends with exactly the
losses of an uninterrupted run (after a clean stop and after SIGINT/SIGTERM/SIGKILL)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from train_helpers import TINY, gradlog_train, hparams_sessions, scalars

pytestmark = pytest.mark.slow

BASE = ["--no-default-plugins", "--epochs", "2", "--quiet"]


def _losses(run_dir) -> dict[int, float]:
    return dict(scalars(str(run_dir), "train/loss"))


def _snapshot(run_dir) -> dict[str, bytes]:
    """Every file below ``run_dir`` and its bytes."""
    out = {}
    for root, _, files in os.walk(run_dir):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, run_dir)] = f.read()
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Two epochs without interruption: the reference every resumed run must match."""
    root = tmp_path_factory.mktemp("full")
    config = root / "tiny.toml"
    config.write_text(TINY)
    run_dir = root / "run"
    result = gradlog_train([*BASE, "--logdir", str(run_dir), "--config", str(config)])
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
    assert "run.toml" in names


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
    killed = gradlog_train([*BASE, "--config", tiny_config, "--logdir", str(part), "-p",
                            "killer:at_step=4,signal=KILL,event=on_batch_start"], test_plugins,
                           killed_marker=tmp_path / "killed")
    assert killed.returncode == -9
    assert (part / "checkpoint-00000004.npz").exists()
    # the killed run is in the HParams table already: its session started, no end yet
    assert hparams_sessions(str(part)) == {"_hparams_/experiment": [0],
                                           "_hparams_/session_start_info": [0]}
    resumed = gradlog_train([*BASE, "--config", tiny_config, "--resume", str(part)],
                            test_plugins)
    assert resumed.returncode == 0, resumed.stderr
    assert _losses(part) == _losses(full)
    # one trial: the first session's start kept, not written again; the end once
    assert hparams_sessions(str(part)) == hparams_sessions(str(full)) == {
        "_hparams_/experiment": [0], "_hparams_/session_start_info": [0],
        "_hparams_/session_end_info": [8]}


def test_the_trials_end_status_is_the_last_record_of_the_run(tmp_path, tiny_config,
                                                             test_plugins):
    """After the plugins' on_train_end too: a run whose end status is on disk lost nothing
    (a resume takes it for finished)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    run_dir = tmp_path / "run"
    done = gradlog_train([*BASE, "--config", tiny_config, "--logdir", str(run_dir), "-p",
                          "farewell"], test_plugins)
    assert done.returncode == 0, done.stderr
    (path,) = run_dir.glob("*tfevents*")
    tags = [(value.tag, event.step) for event in EventFileLoader(str(path)).Load()
            for value in event.summary.value]
    assert tags[-2:] == [("farewell", 8), ("_hparams_/session_end_info", 8)]


@pytest.mark.parametrize("sig, code", [("INT", 130), ("TERM", 143)])
def test_a_run_stopped_after_its_last_checkpoint_is_resumed_to_its_trials_end(
        tmp_path, tiny_config, test_plugins, uninterrupted, sig, code):
    full, part = uninterrupted[0], tmp_path / "part"
    # at the last epoch's end: the last checkpoint is saved, then the run stops before its
    # hparams trial ends
    killed = gradlog_train([*BASE, "--config", tiny_config, "--logdir", str(part), "-p",
                            f"killer:at_step=8,signal={sig},event=on_epoch_end"], test_plugins,
                           killed_marker=tmp_path / "killed")
    assert killed.returncode == code, killed.stderr
    assert (part / "checkpoint-00000008.npz").exists()
    assert "_hparams_/session_end_info" not in hparams_sessions(str(part))
    resumed = gradlog_train(["--resume", str(part)], test_plugins)
    assert resumed.returncode == 0, resumed.stderr
    assert "its training had finished" in resumed.stdout
    assert "epoch 2/2" not in resumed.stdout  # nothing trained again
    assert _losses(part) == _losses(full)
    assert hparams_sessions(str(part)) == hparams_sessions(str(full)) == {
        "_hparams_/experiment": [0], "_hparams_/session_start_info": [0],
        "_hparams_/session_end_info": [8]}
    before = _snapshot(part)
    again = gradlog_train(["--resume", str(part)], test_plugins)
    assert again.returncode == 0 and "already finished at epoch 2" in again.stdout
    assert _snapshot(part) == before


@pytest.mark.parametrize("sig, code", [("INT", 130), ("TERM", 143)])
def test_signal_saves_a_checkpoint_and_resume_matches(tmp_path, tiny_config, test_plugins,
                                                      sig, code, uninterrupted):
    full, part = uninterrupted[0], tmp_path / "part"
    killed = gradlog_train([*BASE, "--config", tiny_config, "--logdir", str(part), "-p",
                            f"killer:at_step=5,signal={sig}"], test_plugins,
                           killed_marker=tmp_path / "killed")
    assert killed.returncode == code, killed.stderr
    assert "checkpoint saved" in killed.stderr
    command = f"gradlog train --resume {part}"
    assert command in killed.stderr
    resumed = gradlog_train(command.split()[2:], test_plugins)  # exactly what it printed
    assert resumed.returncode == 0, resumed.stderr
    assert _losses(part) == _losses(full)


def test_a_second_signal_stops_at_once_and_keeps_the_last_checkpoint(tmp_path, tiny_config,
                                                                      test_plugins,
                                                                      uninterrupted):
    full, part = uninterrupted[0], tmp_path / "part"
    killed = gradlog_train([*BASE, "--config", tiny_config, "--logdir", str(part), "-p",
                            "killer:at_step=5,signal=INT,times=2"], test_plugins,
                           killed_marker=tmp_path / "killed")
    assert killed.returncode == 130, killed.stderr
    assert killed.stderr == (f"\nSIGINT: the last checkpoint (step 4) is kept in {part}; "
                             f"continue with gradlog train --resume {part}\n")
    assert sorted(p.name for p in part.glob("checkpoint-*")) == ["checkpoint-00000004.npz"]
    resumed = gradlog_train(["--resume", str(part), "-q"], test_plugins)
    assert resumed.returncode == 0, resumed.stderr
    assert _losses(part) == _losses(full)


def test_sigkill_loses_nothing_before_the_checkpoint(tmp_path, tiny_config, test_plugins,
                                                     uninterrupted):
    full, part = uninterrupted[0], tmp_path / "part"
    killed = gradlog_train([*BASE, "--config", tiny_config, "--logdir", str(part), "-p",
                            "killer:at_step=6,signal=KILL"], test_plugins,
                           killed_marker=tmp_path / "killed")
    assert killed.returncode == -9
    resumed = gradlog_train(["--resume", str(part), "-q"], test_plugins)
    assert resumed.returncode == 0, resumed.stderr
    assert _losses(part) == _losses(full)  # each step exactly once, same values


def test_resume_restores_every_flag_the_run_was_started_with(tmp_path, tiny_config,
                                                             test_plugins):
    """The issue's case: --epochs 2 --lr 0.1 -p grad-clip:max_norm=0.1, Ctrl-C in epoch 2,
    then the command gradlog printed: the same losses and grad-clip tags as without the
    interruption, although nothing was repeated."""
    flags = ["--epochs", "2", "--lr", "0.1", "-p", "grad-clip:max_norm=0.1",
             "--no-default-plugins", "--config", tiny_config, "-q"]
    full = tmp_path / "full"
    assert gradlog_train([*flags, "--logdir", str(full)]).returncode == 0
    part = tmp_path / "part"
    stopped = gradlog_train([*flags, "--logdir", str(part), "-p",
                             "killer:at_step=4,signal=INT,event=on_batch_start"], test_plugins,
                            killed_marker=tmp_path / "killed")
    assert stopped.returncode == 130, stopped.stderr
    resumed = gradlog_train(["--resume", str(part)], test_plugins)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from checkpoint-00000005.npz (step 5, epoch 1 of 2)" in resumed.stdout
    assert _losses(part) == _losses(full)
    for tag in ("grad-clip/norm_before", "grad-clip/norm_after", "train/lr"):
        assert scalars(str(part), tag) == scalars(str(full), tag), tag
    assert [s for s, _ in scalars(str(part), "train/loss")] == list(range(8))
    # flags given again with the recorded values are fine
    again = gradlog_train([*flags, "--resume", str(part)], test_plugins)
    assert again.returncode == 0 and "already finished at epoch 2" in again.stdout


@pytest.mark.parametrize("flag, says", [
    (["--lr", "0.2"], "lr (--lr) was recorded as 0.1, given 0.2"),
    (["--batch-size", "32"], "batch_size (--batch-size) was recorded as 64, given 32"),
    (["-p", "grad-clip:max_norm=0.5"], "grad-clip:max_norm was recorded as 0.1, given 0.5"),
    (["-p", "histogram"], "plugin 'histogram' was recorded as 'not enabled', given 'enabled'"),
    (["--epochs", "1"], "epochs (--epochs) was recorded as 2, given 1"),
    (["--strict-plugins"], "--strict-plugins was recorded as False, given True"),
    (["shapes-mlp"], "the example was recorded as 'shapes', given 'shapes-mlp'"),
])
def test_a_differing_flag_on_resume_is_refused_naming_key_recorded_and_given(
        tmp_path, tiny_config, flag, says, finished_run):
    before = _snapshot(finished_run)
    result = gradlog_train(["--resume", str(finished_run), *flag])
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"error: cannot resume {finished_run}: {says}; a resumed run "
                             "keeps its configuration, only --epochs may be raised\n")
    assert _snapshot(finished_run) == before


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("finished")
    (root / "tiny.toml").write_text(TINY)
    run_dir = root / "run"
    result = gradlog_train(["--epochs", "2", "--lr", "0.1", "-p", "grad-clip:max_norm=0.1",
                            "--no-default-plugins", "--config", str(root / "tiny.toml"), "-q",
                            "--logdir", str(run_dir)])
    assert result.returncode == 0, result.stderr
    return run_dir


def test_resuming_a_finished_run_says_so_and_writes_nothing(finished_run):
    before = _snapshot(finished_run)
    result = gradlog_train(["--resume", str(finished_run)])
    assert result.returncode == 0, result.stderr
    assert result.stdout == (f"{finished_run}: already finished at epoch 2; nothing to do "
                             "(give --epochs N with N > 2 to train it further)\n")
    assert result.stderr == ""
    assert _snapshot(finished_run) == before


def test_a_larger_epochs_extends_a_finished_run(tmp_path, finished_run):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for rel, data in _snapshot(finished_run).items():
        os.makedirs(os.path.dirname(run_dir / rel), exist_ok=True)
        (run_dir / rel).write_bytes(data)
    first = _losses(run_dir)
    result = gradlog_train(["--resume", str(run_dir), "--epochs", "3", "-q"])
    assert result.returncode == 0, result.stderr
    losses = _losses(run_dir)
    assert sorted(losses) == list(range(12))  # each step once
    assert {s: losses[s] for s in range(8)} == first  # the first two epochs untouched
    assert [s for s, _ in scalars(str(run_dir), "val/loss")] == [4, 8, 12]
    assert "epochs = 3" in (run_dir / "run.toml").read_text()
    assert not (run_dir / "hparams").exists()  # the trial is the run itself
    assert hparams_sessions(str(run_dir)) == {"_hparams_/experiment": [0],
                                              "_hparams_/session_start_info": [0],
                                              "_hparams_/session_end_info": [12]}
    again = gradlog_train(["--resume", str(run_dir)])
    assert again.returncode == 0 and "already finished at epoch 3" in again.stdout


@pytest.mark.parametrize("make, says", [
    (lambda d: None, "no such directory"),
    (lambda d: d.mkdir(), "it holds no gradlog run (no run.toml, no checkpoint-*.npz)"),
    (lambda d: (d.mkdir(), (d / "notes.txt").write_text("mine")),
     "it holds no gradlog run (no run.toml, no checkpoint-*.npz)"),
])
def test_resume_of_a_path_that_holds_no_run_is_a_user_error(tmp_path, make, says):
    target = tmp_path / "typo"
    make(target)
    before = _snapshot(target) if target.exists() else None
    result = gradlog_train(["--resume", str(target)])
    assert result.returncode == 2
    assert result.stderr == f"error: cannot resume {target}: {says}" + (
        "; give the run directory gradlog train printed\n" if "holds no" in says else "\n")
    assert (_snapshot(target) if target.exists() else None) == before  # nothing written


def test_a_run_that_died_before_its_first_checkpoint_starts_over(tmp_path, tiny_config,
                                                                 test_plugins, uninterrupted):
    full, part = uninterrupted[0], tmp_path / "part"
    killed = gradlog_train([*BASE, "--config", tiny_config, "--logdir", str(part), "-p",
                            "killer:at_step=2,signal=KILL"], test_plugins,
                           killed_marker=tmp_path / "killed")
    assert killed.returncode == -9 and (part / "run.toml").exists()
    assert not list(part.glob("checkpoint-*"))
    resumed = gradlog_train(["--resume", str(part)], test_plugins)
    assert resumed.returncode == 0, resumed.stderr
    assert f"no checkpoint in {part} yet: the run starts over" in resumed.stdout
    assert _losses(part) == _losses(full)


def _flip_a_bit_in_the_largest_entry(path) -> str:
    """Flip one bit inside the data of the checkpoint's largest array; returns its entry."""
    import zipfile
    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.compress_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = (int.from_bytes(data[info.header_offset + o:info.header_offset + o
                                               + 2], "little") for o in (26, 28))
    start = info.header_offset + 30 + name_len + extra_len
    data[start + info.compress_size // 2] ^= 0x04
    path.write_bytes(bytes(data))
    return info.filename.removesuffix(".npy")


def test_a_damaged_newest_checkpoint_is_reported_once_and_the_previous_one_used(
        tmp_path, tiny_config, uninterrupted):
    full, part = uninterrupted[0], tmp_path / "part"
    assert gradlog_train([*BASE, "--config", tiny_config, "--logdir", str(part)]
                         ).returncode == 0
    newest = part / "checkpoint-00000008.npz"
    entry = _flip_a_bit_in_the_largest_entry(newest)
    resumed = gradlog_train(["--resume", str(part)])
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stderr.splitlines()
    assert len(lines) == 1, resumed.stderr  # reported once, naming the entry
    assert lines[0].startswith(f"warning: {newest}: damaged entry '{entry}' (obj[")
    assert "Bad CRC-32" in lines[0] and "manifest" not in lines[0]
    assert lines[0].endswith("; resuming from the checkpoint before it")
    assert "resuming from checkpoint-00000004.npz" in resumed.stdout
    assert _losses(part) == _losses(full)
    assert runs_checkpoint_steps(part) == [4, 8]  # the damaged one was replaced


def runs_checkpoint_steps(run_dir) -> list[int]:
    from gradlog.train import runs
    return [step for step, path in runs.checkpoints(str(run_dir)) if runs.load_checkpoint(path)]


def test_logdir_and_resume_naming_two_directories_is_refused(tmp_path, finished_run):
    result = gradlog_train(["--resume", str(finished_run), "--logdir", str(tmp_path / "x")])
    assert result.returncode == 2
    assert "name two run directories" in result.stderr
    assert not (tmp_path / "x").exists()


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


@pytest.mark.parametrize("event, step", [
    ("on_batch_start", 5), ("on_after_backward", 5), ("on_before_optimizer_step", 5),
    ("on_after_optimizer_step", 5), ("on_batch_end", 5), ("on_validation_end", 4),
    ("on_epoch_end", 4)])
def test_a_plugin_stopping_training_at_any_event_resumes_exactly(tmp_path, tiny_config,
                                                                 test_plugins, uninterrupted,
                                                                 event, step):
    full, part = uninterrupted[0], tmp_path / "part"
    stopped = gradlog_train([*BASE, "--config", tiny_config, "--logdir", str(part), "-p",
                             f"stopper:event={event},at_step={step}"], test_plugins,
                            killed_marker=tmp_path / "stopped")
    assert stopped.returncode == 0, stopped.stderr
    assert "Traceback" not in stopped.stderr
    resumed = gradlog_train(["--resume", str(part), "-q"], test_plugins,
                            killed_marker=tmp_path / "stopped")
    assert resumed.returncode == 0, resumed.stderr
    assert _losses(part) == _losses(full)  # each step once: none lost, none done twice
    for tag in ("val/loss", "val/acc"):
        assert scalars(str(part), tag) == scalars(str(full), tag)


def test_a_plugin_stopping_at_every_batch_end_stops_once_and_keeps_a_checkpoint(
        tmp_path, tiny_config, test_plugins):
    part = tmp_path / "part"
    stopped = gradlog_train([*BASE, "--config", tiny_config, "--logdir", str(part), "-p",
                             "stopper:event=on_batch_end,at_step=-1"], test_plugins)
    assert stopped.returncode == 0, stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert [p.name for p in part.glob("checkpoint-*")] == ["checkpoint-00000001.npz"]
    assert [s for s, _ in _losses(part).items()] == [0]
