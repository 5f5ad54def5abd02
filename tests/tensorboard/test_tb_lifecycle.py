"""Flushing at exit, on SIGINT/SIGTERM (chained to the previous handler), after a SIGKILL crash,
and signals that arrive while a writer is busy."""

import gc
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from tb_helpers import (
    child_env,
    event_files,
    read_events,
    run_python,
    scalar_points,
    strict_records,
)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto.event_pb2 import Event

from gradlog.tensorboard import SummaryWriter, lifecycle

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

WRITE_THEN_WAIT = """
    import sys, time
    {setup}
    from gradlog.tensorboard import SummaryWriter
    writer = SummaryWriter(sys.argv[1], max_queue=1000, flush_secs=1000)
    for step in range(25):
        writer.add_scalar("loss", step / 10, step)
    {wait}
"""
READY = 'print("ready", flush=True); time.sleep(60)'


def start_child(log_dir, setup="", wait=READY):
    code = textwrap.dedent(WRITE_THEN_WAIT.format(setup=setup, wait=wait))
    child = subprocess.Popen([sys.executable, "-c", code, log_dir], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=child_env())
    assert child.stdout.readline().strip() == "ready", child.stderr.read()
    return child


def expected_points():
    return [(step, pytest.approx(step / 10)) for step in range(25)]


def test_exit_without_close_flushes_everything(log_dir):
    run_python("""
        import sys
        from gradlog.tensorboard import SummaryWriter
        writer = SummaryWriter(sys.argv[1], max_queue=1000, flush_secs=1000)
        for step in range(25):
            writer.add_scalar("loss", step / 10, step)
    """, log_dir)
    assert scalar_points(log_dir, "loss") == expected_points()


def test_sigterm_flushes_then_dies_of_sigterm(log_dir):
    child = start_child(log_dir)
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=30)
    assert child.returncode == -signal.SIGTERM
    assert scalar_points(log_dir, "loss") == expected_points()


def test_sigint_flushes_before_keyboardinterrupt(log_dir):
    # The child leaves with os._exit, skipping atexit: only the signal handler can have flushed.
    child = start_child(log_dir, wait=f"""
    try:
        {READY}
    except KeyboardInterrupt:
        import os; os._exit(3)""")
    child.send_signal(signal.SIGINT)
    child.communicate(timeout=30)
    assert child.returncode == 3
    assert scalar_points(log_dir, "loss") == expected_points()


def test_a_programs_own_sigterm_handler_still_runs_after_the_flush(log_dir):
    child = start_child(log_dir, setup="""
    import os, signal
    signal.signal(signal.SIGTERM, lambda *_: (print("own handler", flush=True), os._exit(5)))""")
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 5 and out.strip() == "own handler"
    assert scalar_points(log_dir, "loss") == expected_points()


def test_handlers_are_installed_while_writers_are_open_and_restored_after(log_dir):
    gc.collect()
    if list(lifecycle._writers):
        pytest.skip("another test left a writer open")
    before = signal.getsignal(signal.SIGTERM)
    writer = SummaryWriter(log_dir)
    assert signal.getsignal(signal.SIGTERM) is lifecycle._on_signal
    writer.close()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_inside_a_critical_section_is_handled_when_it_ends(log_dir):
    calls = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        writer = SummaryWriter(log_dir, max_queue=1000)
        writer.add_scalar("loss", 1.0, 0)
        lifecycle.main_thread.busy += 1  # as if the signal interrupted a write()
        lifecycle._on_signal(signal.SIGTERM, None)
        assert calls == [] and len(lifecycle.deferred_signals) == 1  # the flush, deferred
        lifecycle.main_thread.busy -= 1
        writer.add_scalar("loss", 2.0, 1)  # leaving the critical section runs the signal
        assert calls == [signal.SIGTERM] and lifecycle.deferred_signals == []
        assert scalar_points(log_dir, "loss") == [(0, 1.0), (1, 2.0)]  # flushed first
        writer.close()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigkill_loses_only_unflushed_events_and_corrupts_nothing(log_dir):
    code = """
        import sys
        from gradlog.tensorboard import SummaryWriter
        writer = SummaryWriter(sys.argv[1], max_queue=10)
        for step in range(1000):
            writer.add_scalar("loss", float(step), step)
        writer.flush()
        print("flushed", flush=True)
        step = 1000
        while True:
            writer.add_scalar("loss", float(step), step)
            step += 1
    """
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), log_dir],
                             stdout=subprocess.PIPE, text=True, env=child_env())
    assert child.stdout.readline().strip() == "flushed"
    time.sleep(0.3)
    child.kill()
    child.communicate(timeout=30)
    (path,) = event_files(log_dir)
    payloads, torn = strict_records(path)  # every complete record has valid CRCs
    steps = [e.step for e in map(Event.FromString, payloads) if e.summary.value]
    assert steps == list(range(len(steps))) and len(steps) >= 1000  # nothing flushed is lost
    accumulator = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    accumulator.Reload()
    assert [s.step for s in accumulator.Scalars("loss")] == steps
    # A new session never appends to the crashed file: it starts its own.
    before = pathlib.Path(path).read_bytes()
    with SummaryWriter(log_dir, purge_step=500) as writer:
        writer.add_scalar("loss", -1.0, 500)
    assert pathlib.Path(path).read_bytes() == before and len(event_files(log_dir)) == 2
    assert read_events(event_files(log_dir)[1])[1].step == 500
    assert os.path.getsize(path) >= len(b"".join(payloads)) + torn


def test_signals_at_random_points_never_deadlock_duplicate_or_tear(log_dir):
    # A thread sends SIGTERM every few hundred microseconds while the main thread logs, until
    # the program's own handler has counted 200 of them (however slow the machine: the loop
    # logs until then). Every event must be in the file exactly once.
    result = run_python("""
        import os, signal, sys, threading, time
        received = []
        signal.signal(signal.SIGTERM, lambda *_: received.append(1))
        from gradlog.tensorboard import SummaryWriter
        writer = SummaryWriter(sys.argv[1], max_queue=7)
        done = threading.Event()

        def pester():
            while len(received) < 200:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.0003)
            done.set()

        threading.Thread(target=pester, daemon=True).start()
        step = 0
        while step < 30000 or not done.is_set():
            writer.add_scalar("loss", float(step), step)
            if step % 1000 == 0:
                writer.flush()
            step += 1
        writer.close()
        print(len(received), step)
    """, log_dir, timeout=300)
    received, logged = map(int, result.stdout.split())
    assert received >= 200 and logged >= 30000
    (path,) = event_files(log_dir)
    payloads, torn = strict_records(path)
    steps = [e.step for e in map(Event.FromString, payloads) if e.summary.value]
    assert torn == 0 and steps == list(range(logged))


def test_handlers_come_back_after_another_handler_displaced_them_and_left(log_dir):
    """A framework installs its handler over ours while a writer is open, the writer closes
    (ours cannot be restored under theirs), then the framework puts back the default: the
    next writer installs ours again (Lightning's fit does this when it ends by an error)."""
    gc.collect()
    if list(lifecycle._writers):
        pytest.skip("another test left a writer open")
    before = signal.getsignal(signal.SIGTERM)
    writer = SummaryWriter(log_dir)
    signal.signal(signal.SIGTERM, lambda *_: None)  # the framework's, over ours
    writer.close()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the framework's teardown
    try:
        writer = SummaryWriter(log_dir)
        assert signal.getsignal(signal.SIGTERM) is lifecycle._on_signal
        writer.close()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)
