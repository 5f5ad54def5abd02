"""The background writer's jobs at exit, on SIGTERM, after SIGKILL, under a storm of signals, and
across fork: every guarantee of the synchronous writer, with histograms still queued."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from tb_helpers import (
    SIGTERM_STORM,
    child_env,
    event_files,
    read_events,
    run_python,
    strict_records,
)
from tensorboard.compat.proto.event_pb2 import Event

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

# A child that queues histograms behind a slow job (the first histogram waits for a file to
# appear), so they are provably still queued when it exits or is signalled; {release} makes
# the file appear.
QUEUED = """
    import os, sys, time
    import numpy as np
    from gradlog.tensorboard import SummaryWriter
    from gradlog.tensorboard import writer as writer_module
    real = writer_module.histogram_proto
    release = sys.argv[1] + ".release"

    def slow(*args):
        while not os.path.exists(release):
            time.sleep(0.01)
        return real(*args)

    writer_module.histogram_proto = slow
    writer = SummaryWriter(sys.argv[1], max_queue=1000, flush_secs=1000)
    for step in range(20):
        writer.add_histogram("w", np.arange(100.0) + step, step)
        writer.add_scalar("loss", step / 10, step)
    assert writer._worker.pending > 20  # still queued
    {after}
"""


def logged(log_dir):
    """(step, tag) of every value, in file order."""
    return [(e.step, v.tag) for e in read_events(log_dir) for v in e.summary.value]


EXPECTED = [(step, tag) for step in range(20) for tag in ("w", "loss")]


def test_exit_without_close_writes_every_queued_histogram(log_dir):
    # The jobs are released only once the program is exiting: exit must wait for them.
    run_python(QUEUED.format(after="""
    import threading
    def release_later():
        time.sleep(0.3)
        open(release, "w").close()
    threading.Thread(target=release_later, daemon=True).start()
    """), log_dir)
    assert logged(log_dir) == EXPECTED


def test_sigterm_writes_the_queued_histograms_then_dies_of_sigterm(log_dir):
    code = textwrap.dedent(QUEUED.format(after='print("ready", flush=True); time.sleep(60)'))
    child = subprocess.Popen([sys.executable, "-c", code, log_dir], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=child_env())
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        child.send_signal(signal.SIGTERM)  # the handler waits for the queued jobs...
        time.sleep(0.3)
        assert child.poll() is None
        open(log_dir + ".release", "w").close()  # ...which run once released
        child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == -signal.SIGTERM
    assert logged(log_dir) == EXPECTED


def test_sigkill_during_background_logging_leaves_an_intact_prefix(log_dir):
    code = """
        import sys
        import numpy as np
        from gradlog.tensorboard import SummaryWriter
        writer = SummaryWriter(sys.argv[1], max_queue=10)
        values = np.random.default_rng(0).standard_normal(20_000).astype(np.float32)
        step = 0
        while True:
            writer.add_histogram("w", values, step)
            writer.add_scalar("loss", float(step), step)
            if step == 200:
                writer.flush()
                print("flushed", flush=True)
            step += 1
    """
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), log_dir],
                             stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        assert child.stdout.readline().strip() == "flushed"
        time.sleep(0.3)
    finally:
        child.kill()
        child.communicate(timeout=30)
    (path,) = event_files(log_dir)
    payloads, _ = strict_records(path)  # every complete record has valid CRCs
    found = [(e.step, v.tag) for e in map(Event.FromString, payloads) for v in e.summary.value]
    expected = [(step, tag) for step in range(len(found)) for tag in ("w", "loss")]
    assert len(found) >= 2 * 201 and found == expected[:len(found)]  # in order, none lost


def test_signals_at_random_points_never_deadlock_duplicate_or_reorder(log_dir):
    # A thread sends SIGTERM every few hundred microseconds while the main thread logs
    # histograms and scalars through the worker; the program's own handler counts them.
    result = run_python(SIGTERM_STORM + textwrap.dedent("""
        import numpy as np
        from gradlog.tensorboard import SummaryWriter
        writer = SummaryWriter(sys.argv[1], max_queue=3)
        values = np.arange(2000.0)
        for step in range(3000):
            writer.add_histogram("w", values, step)
            writer.add_scalar("loss", float(step), step)
            if step % 500 == 0:
                writer.flush()
        done.set()
        writer.close()
        print(len(received), writer.queue_waits)
    """), log_dir, timeout=180)
    received, waits = map(int, result.stdout.split())
    assert received > 10 and waits > 0
    (path,) = event_files(log_dir)
    payloads, torn = strict_records(path)
    found = [(e.step, v.tag) for e in map(Event.FromString, payloads) for v in e.summary.value]
    assert torn == 0 and found == [(step, tag) for step in range(3000) for tag in ("w", "loss")]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_drops_the_parents_queued_jobs(log_dir):
    result = run_python(QUEUED.format(after="") + """
    pid = os.fork()
    if pid == 0:  # the parent's 40 queued jobs are the parent's
        writer_module.histogram_proto = real
        writer.add_histogram("child", np.arange(3.0), 0)
        writer.close()
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    open(release, "w").close()
    writer.close()
    print(os.getpid())
    """, log_dir)
    parent_pid = int(result.stdout)
    files = {int(os.path.basename(p).split(".")[5]) == parent_pid: p
             for p in event_files(log_dir)}
    assert logged(files[True]) == EXPECTED
    assert [v.tag for e in read_events(files[False]) for v in e.summary.value] == ["child"]
