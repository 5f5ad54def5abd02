"""Concurrency: grad mode is per thread (threads in lock-step, one under ``no_grad``, do not
affect each other; tests/autograd/test_grad_mode.py has the single-switch cases), and two
processes logging into the same directory at the same moment write separate, complete
files."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from reliability_helpers import accumulated, event_files, strict_records
from tensorboard.compat.proto.event_pb2 import Event

import gradlog as gl


def test_grad_mode_is_per_thread_under_concurrent_work():
    rounds = 200
    barrier = threading.Barrier(2, timeout=30)
    seen: dict[str, list] = {"grad": [], "no_grad": []}
    errors: list = []

    def work(name: str) -> None:
        try:
            w = gl.ones(3, requires_grad=True)
            context = gl.no_grad() if name == "no_grad" else gl.enable_grad()
            with context:
                for i in range(rounds):
                    barrier.wait()  # both threads are inside their mode at the same time
                    y = (w * (i + 1)).tanh().sum()
                    seen[name].append((gl.is_grad_enabled(), y.requires_grad,
                                       y.grad_fn is not None))
                    if name == "grad":
                        y.backward()
                        assert w.grad is not None
        except BaseException as exc:  # noqa: BLE001  (reported by the main thread)
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(n,)) for n in ("grad", "no_grad")]
    with gl.no_grad():  # the main thread's own mode reaches neither
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not gl.is_grad_enabled()
    assert not errors, errors
    assert seen["grad"] == [(True, True, True)] * rounds
    assert seen["no_grad"] == [(False, False, False)] * rounds
    assert gl.is_grad_enabled()


def test_inference_mode_and_set_grad_enabled_stay_in_their_thread():
    inside, release = threading.Event(), threading.Event()

    def worker():
        with gl.inference_mode():
            gl.set_grad_enabled(False)
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    inside.wait(10)
    try:
        assert gl.is_grad_enabled() and not gl.is_inference_mode_enabled()
        y = gl.ones(2, requires_grad=True) * 2
        assert y.requires_grad and y.grad_fn is not None
    finally:
        release.set()
        thread.join()


_WRITER = r"""
import os, sys, time
from gradlog.storage import files
from gradlog.tensorboard import SummaryWriter
log_dir, go, name, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def wait_for(*paths):
    while not all(os.path.exists(p) for p in paths):
        time.sleep(0.001)


# The worst interleaving, made certain: each process looks at the directory before either
# creates its file (a writer that looks at what the directory holds must not be misled).
real_listdir = os.listdir
def listdir(path="."):
    found = real_listdir(path)
    if os.path.realpath(path) == os.path.realpath(log_dir):
        open(f"{go}.{name}", "w").close()
        wait_for(f"{go}.a", f"{go}.b")
    return found
files.os = type("os", (), {"__getattr__": lambda self, a: getattr(os, a),
                                "listdir": staticmethod(listdir)})()
wait_for(go)  # both start writing at the same moment
writer = SummaryWriter(log_dir, max_queue=7)
for step in range(n):
    writer.add_scalar(f"{name}/loss", float(step) + (0.5 if name == "b" else 0.0), step)
    writer.add_scalar("shared/loss", float(step), step)
    if step % 500 == 0:
        writer.flush()
writer.close()
"""


@pytest.mark.slow
def test_two_processes_in_one_logdir_write_separate_complete_files(tmp_path):
    log_dir, go, n = tmp_path / "run", tmp_path / "go", 3000
    children = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(_WRITER), str(log_dir),
                                  str(go), name, str(n)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    time.sleep(0.5)
    go.write_text("")
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
    files = event_files(log_dir)
    assert len(files) == 2 and len({os.path.basename(f).split(".")[5] for f in files}) == 2
    per_file = {}
    for path in files:
        payloads, torn = strict_records(path)  # every record whole, CRCs valid
        assert torn == 0
        events = [Event.FromString(p) for p in payloads]
        tags = {v.tag for e in events for v in e.summary.value} - {"shared/loss"}
        (tag,) = tags  # one process per file
        steps = [e.step for e in events for v in e.summary.value if v.tag == tag]
        assert steps == list(range(n))  # complete and in order
        per_file[tag] = [v.simple_value for e in events for v in e.summary.value
                         if v.tag == tag]
    assert sorted(per_file) == ["a/loss", "b/loss"]
    np.testing.assert_array_equal(per_file["b/loss"], np.arange(n) + 0.5)
    found = accumulated(log_dir)  # TensorBoard reads the directory as one run
    assert [s for s, _ in found["a/loss"]] == list(range(n))
    assert [s for s, _ in found["b/loss"]] == list(range(n))
    assert len(found["shared/loss"]) == 2 * n  # both processes' points, neither hidden
