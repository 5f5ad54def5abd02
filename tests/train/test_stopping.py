"""How ``gradlog train`` stops when it is not the run that fails: Ctrl-C or SIGTERM during
start-up (130/143, one line, nothing written), a full disk (one error line naming the file, no
traceback at exit), and the order of a checkpoint: the event files are fsynced before it."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from train_helpers import TINY

from gradlog.cli import main
from gradlog.storage import streams
from gradlog.train import TrainOptions, train

pytestmark = pytest.mark.slow

WAITS = """
import os, time
{where}
def build(config):
    {in_build}
"""
SLEEP = "open(os.environ['GRADLOG_TEST_READY'], 'w').close(); time.sleep(120)"


def _wait_for(path, child, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the child never got ready"
        time.sleep(0.02)


@pytest.mark.parametrize("phase", ["import", "build"])
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_start_up_exits_with_its_status_and_one_line(tmp_path, phase, sig,
                                                                     code):
    example = tmp_path / "slow.py"
    example.write_text(WAITS.format(where=SLEEP if phase == "import" else "",
                                    in_build=SLEEP if phase == "build" else "return {}"))
    ready = tmp_path / "ready"
    run_dir = tmp_path / "run"
    # faulthandler: a child that does not stop is made to print its threads' stacks (SIGABRT)
    env = dict(os.environ, GRADLOG_TEST_READY=str(ready), PYTHONFAULTHANDLER="1")
    child = subprocess.Popen([sys.executable, "-m", "gradlog.cli", "train", str(example),
                              "--no-default-plugins", "--logdir", str(run_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_for(ready, child)
        child.send_signal(sig)
        out, err = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGABRT)
        _, stacks = child.communicate(timeout=30)
        pytest.fail(f"gradlog train did not stop on {signal.Signals(sig).name}:\n{stacks}")
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == code, err
    assert err == f"{signal.Signals(sig).name}: interrupted while starting; nothing was " \
                  "trained\n"
    assert out == "" and not run_dir.exists()


def test_ctrl_c_before_the_command_runs_exits_130(monkeypatch):
    import gradlog.train

    def interrupted(options):
        raise KeyboardInterrupt

    monkeypatch.setattr(gradlog.train, "train", interrupted)
    result = CliRunner().invoke(main, ["train"], standalone_mode=True)
    assert result.exit_code == 130
    assert result.stderr.strip() == "SIGINT: interrupted while starting; nothing was trained"
    assert "Aborted" not in result.output


def _disk_of(limit: int):
    """For a child process: files may grow to ``limit`` bytes, then writes fail (EFBIG), as
    on a full disk; SIGXFSZ is ignored so the write error is what the program sees."""
    import resource

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="POSIX file size limits")
def test_a_full_disk_is_one_error_line_naming_the_file_and_no_exit_traceback(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    run_dir = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "gradlog.cli", "train", "--config",
                             str(config), "--logdir", str(run_dir), "-q"],
                            preexec_fn=_disk_of(150_000), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1
    (name,) = [n for n in os.listdir(run_dir) if "tfevents" in n]
    assert result.stderr == (f"error: cannot write {run_dir / name}: File too large; there "
                             "is no checkpoint yet (resuming starts the run over)\n")
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    acc = pea.EventAccumulator(str(run_dir))
    acc.Reload()
    assert acc.Tensors("config/text_summary")  # what reached the disk reads back


def test_event_files_are_fsynced_before_each_checkpoint(tmp_path, monkeypatch):
    """Each checkpoint's rename comes after an fsync of every event file written before it
    (the run's; its hparams trial is the run itself, no sub-run's files)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc")
    order: list[tuple[str, str]] = []
    real_fsync, real_replace, real_write = os.fsync, os.replace, os.write

    def fsync(fd):
        order.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        order.append(("replace", os.path.abspath(dst)))
        return real_replace(src, dst)

    class Writes:  # the event files' os, recording each write
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def write(fd, data):
            order.append(("write", os.readlink(f"/proc/self/fd/{fd}")))
            return real_write(fd, data)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(streams, "os", Writes())
    run_dir = tmp_path / "run"
    code = train(TrainOptions(logdir=str(run_dir), epochs=2, default_plugins=False,
                              plugins=("grad-norm:every=1",), quiet=True,
                              extra={"train_size": 128, "val_size": 32, "two_object_size": 8}),
                 io.StringIO(), io.StringIO())
    monkeypatch.undo()
    assert code == 0
    saved = [i for i, (what, path) in enumerate(order)
             if what == "replace" and os.path.basename(path).startswith("checkpoint-")]
    assert len(saved) == 2
    for i in saved:
        last_write = {path: j for j, (what, path) in enumerate(order[:i]) if what == "write"}
        assert {os.path.dirname(p) for p in last_write} == {str(run_dir)}
        for path, j in last_write.items():
            assert ("fsync", path) in order[j + 1:i], f"{path} not fsynced before {order[i]}"


# Puts itself in the import system: when gradlog's first module after gradlog.starting is
# imported, it says so and waits, so the test's signal arrives while gradlog is importing
SLOW_IMPORT = """
import os, sys, time


class SlowAutograd:
    def find_spec(self, name, path=None, target=None):
        if name == "gradlog.autograd" and "GRADLOG_TEST_READY" in os.environ:
            open(os.environ["GRADLOG_TEST_READY"], "w").close()
            time.sleep(60)
        return None


sys.meta_path.insert(0, SlowAutograd())
"""


@pytest.mark.parametrize("command, says", [
    (["train"], "SIGINT: interrupted while starting; nothing was trained\n"),
    (["inspect", "."], "interrupted\n"),
])
def test_ctrl_c_while_gradlog_imports_is_one_line_and_130(tmp_path, command, says):
    (tmp_path / "sitecustomize.py").write_text(SLOW_IMPORT)
    ready = tmp_path / "ready"
    env = dict(os.environ, GRADLOG_TEST_READY=str(ready),
               PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path),
                                                        os.environ.get("PYTHONPATH")])))
    child = subprocess.Popen([sys.executable, "-m", "gradlog.cli", *command], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_for(ready, child)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert (child.returncode, err, out) == (130, says, "")


def test_a_program_that_imports_gradlog_keeps_pythons_sigint_handler():
    done = subprocess.run([sys.executable, "-c", "import signal, gradlog, gradlog.cli; "
                           "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout == "True\n", done.stderr


# A finalizer runs (a cycle freed by the collector) while the signal arrives, then the file
# sleeps at import: the Interrupted raised inside the finalizer is one Python drops
IN_A_FINALIZER = """
import gc, os, time
from gradlog.examples.shapes import Options, build


class Held:
    def __del__(self):
        open(os.environ["GRADLOG_TEST_READY"], "w").close()
        time.sleep(5)


a, b = Held(), Held()
a.other, b.other = b, a
del a, b
gc.collect()
time.sleep(60)
"""


def test_a_signal_inside_a_finalizer_during_start_up_still_stops_it(tmp_path):
    example = tmp_path / "finalizer.py"
    example.write_text(IN_A_FINALIZER)
    ready, run_dir = tmp_path / "ready", tmp_path / "run"
    env = dict(os.environ, GRADLOG_TEST_READY=str(ready))
    child = subprocess.Popen([sys.executable, "-m", "gradlog.cli", "train", str(example),
                              "--no-default-plugins", "--logdir", str(run_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_for(ready, child)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)  # not the 60 s the file sleeps after
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, err
    assert err == "SIGINT: interrupted while starting; nothing was trained\n"
    assert out == "" and not run_dir.exists()
