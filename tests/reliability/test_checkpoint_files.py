"""Checkpoint files on disk: created like any file the user writes (the umask decides who may
read them), never confused with the temporary file of an interrupted write, which the next
checkpoint of the run removes."""

from __future__ import annotations

import os

import pytest

import gradlog as gl
from gradlog.train import runs


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_checkpoint_permissions_follow_the_umask_like_open(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        gl.save({"w": gl.ones(2)}, tmp_path / "c.npz")
        with open(tmp_path / "plain", "wb"):
            pass
    finally:
        os.umask(previous)
    assert os.stat(tmp_path / "c.npz").st_mode & 0o777 == mode
    assert os.stat(tmp_path / "plain").st_mode & 0o777 == mode


def test_a_killed_writes_temporary_file_is_not_a_checkpoint_and_is_removed(tmp_path):
    state = {"step": 4, "epoch": 1}
    runs.save_checkpoint(str(tmp_path), state)
    # what a SIGKILL inside gl.save leaves: a dot-file next to the checkpoint
    stale = tmp_path / ".checkpoint-00000008.npz.0123abcd.tmp"
    stale.write_bytes(b"PK\x03\x04 half an archive")
    unrelated = tmp_path / ".notes.tmp"
    unrelated.write_text("the user's")
    assert runs.newest_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-00000004.npz")
    runs.save_checkpoint(str(tmp_path), {**state, "step": 8})
    assert sorted(os.listdir(tmp_path)) == [".notes.tmp", "checkpoint-00000004.npz",
                                            "checkpoint-00000008.npz"]
    assert runs.load_checkpoint(runs.newest_checkpoint(str(tmp_path)))["step"] == 8


def test_only_the_newest_two_checkpoints_are_kept(tmp_path):
    for step in (4, 8, 12):
        runs.save_checkpoint(str(tmp_path), {"step": step})
    assert [s for s, _ in runs.checkpoints(str(tmp_path))] == [8, 12]


def test_a_checkpoint_removes_the_later_ones_of_an_abandoned_timeline(tmp_path):
    """Resumed from step 4 because checkpoint 8 was damaged, the run saves at step 6 (a
    SIGINT): checkpoint 8 belongs to the timeline the resume left, and goes."""
    for step in (4, 8):
        runs.save_checkpoint(str(tmp_path), {"step": step})
    runs.save_checkpoint(str(tmp_path), {"step": 6})
    assert [s for s, _ in runs.checkpoints(str(tmp_path))] == [4, 6]


def test_a_directory_named_as_a_checkpoint_is_not_one(tmp_path, tiny_toml):
    """A directory in the way of the second epoch's checkpoint (step 16): the run stops naming
    it (not the temporary file), says which checkpoint really is kept, and resumes from it."""
    from click.testing import CliRunner

    from gradlog.cli import main
    run_dir = tmp_path / "run"
    blocker = run_dir / "checkpoint-00000016.npz"
    blocker.mkdir(parents=True)
    assert runs.checkpoints(str(run_dir)) == []
    args = ["train", "--no-default-plugins", "--batch-size", "32", "--config", tiny_toml,
            "--logdir", str(run_dir), "-q"]
    result = CliRunner().invoke(main, [*args, "--epochs", "2"])  # 8 steps an epoch
    assert result.exit_code == 1, result.output
    assert result.stderr == (f"error: cannot write {blocker}: Is a directory; the last "
                             "checkpoint (step 8) is kept\n")
    assert [s for s, _ in runs.checkpoints(str(run_dir))] == [8]
    blocker.rmdir()
    again = CliRunner().invoke(main, ["train", "--resume", str(run_dir), "-q"])
    assert again.exit_code == 0, again.output
    assert [s for s, _ in runs.checkpoints(str(run_dir))] == [8, 16]
