"""One ``gradlog train`` per run directory: two commands started together on the same new
``--logdir`` (both past the "already holds a run" check before either writes) train once; the
other is refused in one line naming the directory and the process holding it. The lock ends
with the process that holds it, however it ends."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from train_helpers import TINY, scalars

from gradlog import storage
from gradlog.train.errors import UserError
from gradlog.train.run_lock import LOCK_NAME, RunLock

pytestmark = pytest.mark.slow

# build() waits until the test lets both commands go on together: each has checked that the
# directory holds no run, and neither has written anything yet
TOGETHER = """
import os, time
from gradlog.examples.shapes import Options, build as shapes_build


def build(config):
    open(os.environ["GRADLOG_TEST_READY"] + str(os.getpid()), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.environ["GRADLOG_TEST_GO"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return shapes_build(config)
"""


def _start(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gradlog.cli", "train", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_commands_on_one_new_logdir_train_once(tmp_path):
    example, config = tmp_path / "together.py", tmp_path / "tiny.toml"
    example.write_text(TOGETHER)
    config.write_text(TINY)
    run_dir, go = tmp_path / "run", tmp_path / "go"
    env = dict(os.environ, GRADLOG_TEST_READY=str(tmp_path / "ready-"), GRADLOG_TEST_GO=str(go))
    args = [str(example), "--no-default-plugins", "--epochs", "1", "--batch-size", "64",
            "--config", str(config), "--logdir", str(run_dir), "-q"]
    children = [_start(args, env), _start(args, env)]
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("ready-*"))) < 2:
            assert all(c.poll() is None for c in children), [c.communicate() for c in children]
            assert time.monotonic() < deadline, "the commands never got ready"
            time.sleep(0.02)
        go.touch()
        ended = [c.communicate(timeout=240) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.communicate()
    statuses = sorted(c.returncode for c in children)
    assert statuses == [0, 2], ended
    winner = next(c for c in children if c.returncode == 0)
    _, err = ended[children.index(next(c for c in children if c.returncode == 2))]
    # (the holder writes its pid just after taking the lock: a refusal in between says
    # "starting", as a loaded machine showed)
    held = [f"error: {run_dir} is in use by another gradlog train ({who}), which holds it "
            "until it ends; choose another --logdir, or --resume it once that run has ended\n"
            for who in (f"pid {winner.pid}", "starting")]
    taken = f"error: {run_dir} already holds a run; use --resume {run_dir} to continue it, " \
            "or choose another --logdir\n"
    assert err in (*held, taken)
    assert len(list(run_dir.glob("*tfevents*"))) == 1
    written = list(run_dir.rglob("*tfevents*"))
    assert written and all(f".{winner.pid}." in p.name for p in written), written
    steps = [s for s, _ in scalars(str(run_dir), "train/loss")]
    assert steps == [0, 1, 2, 3]  # 256 examples, batch 64: each step once


@contextlib.contextmanager
def _held(run_dir) -> Iterator[subprocess.Popen]:
    """Another process holding ``run_dir``'s lock for the block (killed at its end)."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from gradlog.train.run_lock import RunLock; "
        f"lock = RunLock({str(run_dir)!r}); print('held', flush=True); time.sleep(120)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        yield holder
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
        holder.stdout.close()


def test_the_lock_goes_with_the_process_however_it_ends(tmp_path):
    """A process holding the run no longer holds it once killed (SIGKILL): the next one
    takes it."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with _held(run_dir) as holder:
        assert (run_dir / LOCK_NAME).read_text() == f"{holder.pid}\n"
        with pytest.raises(UserError, match=re.escape(f"(pid {holder.pid})")):
            RunLock(str(run_dir))
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    lock = RunLock(str(run_dir))  # free again
    lock.release()


def test_a_resume_while_another_command_holds_the_run_is_refused(tmp_path):
    from click.testing import CliRunner

    from gradlog.cli import main
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    run_dir = tmp_path / "run"
    first = CliRunner().invoke(main, ["train", "--no-default-plugins", "--epochs", "1",
                                      "--batch-size", "64", "--config", str(config),
                                      "--logdir", str(run_dir), "-q"])
    assert first.exit_code == 0, first.output
    before = sorted(p.name for p in run_dir.iterdir())
    with _held(run_dir) as holder:
        again = CliRunner().invoke(main, ["train", "--resume", str(run_dir), "--epochs", "2",
                                          "-q"])
    assert again.exit_code == 2, again.output
    assert again.stderr == f"error: {run_dir} is in use by another gradlog train (pid " \
                           f"{holder.pid}), which holds it until it ends; choose another " \
                           "--logdir, or --resume it once that run has ended\n"
    assert sorted(p.name for p in run_dir.iterdir()) == before
    resumed = CliRunner().invoke(main, ["train", "--resume", str(run_dir), "--epochs", "2",
                                        "-q"])
    assert resumed.exit_code == 0, resumed.output


def test_a_url_without_a_conditional_create_is_checked_then_written(tmp_path):
    """fsspec's memory:// has no conditional create (fsspec's own ``mode="create"`` checks,
    then writes), and a backend may ignore the mode and overwrite: the claim checks that no
    lock object exists before it writes one, so a second claim is refused all the same, and
    the object goes when the claim is released."""
    fsspec = pytest.importorskip("fsspec")
    from fsspec.implementations.memory import MemoryFileSystem

    class Overwriting(MemoryFileSystem):
        """A backend without a conditional create: ``mode`` ignored, the object replaced."""

        protocol = "gradlog-test-overwriting"

        def pipe_file(self, path, value, mode="overwrite", **kwargs):
            super().pipe_file(path, value, **kwargs)

    fsspec.register_implementation(Overwriting.protocol, Overwriting, clobber=True)
    for protocol in ("memory", Overwriting.protocol):
        url = f"{protocol}://gradlog-tests/{tmp_path.name}/run"
        fs, key = storage.filesystem(f"{url}/{LOCK_NAME}")
        lock = RunLock(url)
        try:
            first = fs.cat_file(key)
            with pytest.raises(UserError) as refused:
                RunLock(url)
            assert str(refused.value).startswith(
                f"{url} is in use by another gradlog train (pid {os.getpid()} on ")
            assert fs.cat_file(key) == first
        finally:
            lock.release()
        assert not fs.exists(key)
        RunLock(url).release()  # free again
