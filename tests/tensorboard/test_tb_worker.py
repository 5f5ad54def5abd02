"""The background writer: order, bounds, waits, errors, copies, and the same files as the
synchronous writer."""

import gc
import os
import threading
import time

import numpy as np
import pytest
from tb_helpers import event_files, read_events, scalar_points, strict_records
from tensorboard.compat.proto.event_pb2 import Event

import gradlog as gl
from gradlog.tensorboard import SummaryWriter, event_file
from gradlog.tensorboard import writer as writer_module
from gradlog.tensorboard.worker import BackgroundWorker

TIMEOUT = 30  # seconds: only ever reached when something is broken


def writer_threads():
    return [t for t in threading.enumerate() if t.name == "gradlog-tb-writer"]


def run_in_thread(function):
    """Start ``function`` on a thread; return the thread and a list that gets its error."""
    errors = []

    def target():
        try:
            function()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            errors.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, errors


class Gate:
    """A job that blocks until opened, and says when it has started."""

    def __init__(self):
        self.started, self.opened = threading.Event(), threading.Event()

    def __call__(self):
        self.started.set()
        assert self.opened.wait(TIMEOUT)


# -- the worker alone -------------------------------------------------------------------------

def test_jobs_run_one_at_a_time_in_submission_order():
    worker, done, running = BackgroundWorker(max_items=7, max_bytes=1 << 20), [], []

    def job(i):
        running.append(i)
        assert len(running) == 1  # never two at once
        done.append(i)
        running.pop()

    for i in range(500):
        worker.submit(job, (i,))
    worker.drain()
    assert done == list(range(500)) and worker.idle and worker.pending == 0
    worker.stop()


def test_a_full_queue_makes_the_caller_wait_and_counts_it():
    worker, gate = BackgroundWorker(max_items=3, max_bytes=1 << 20), Gate()
    worker.submit(gate)
    assert gate.started.wait(TIMEOUT)
    worker.submit(lambda: None)
    worker.submit(lambda: None)  # three pending: the gate runs, two wait
    assert worker.waits == 0
    thread, errors = run_in_thread(lambda: worker.submit(lambda: None))
    thread.join(0.2)
    assert thread.is_alive() and worker.pending == 3  # waiting, nothing dropped
    gate.opened.set()
    thread.join(TIMEOUT)
    worker.drain()
    assert not errors and worker.waits == 1 and worker.wait_seconds > 0
    worker.stop()


def test_the_byte_bound_makes_the_caller_wait_but_takes_a_large_job_alone():
    worker, gate, ran = BackgroundWorker(max_items=100, max_bytes=100), Gate(), []
    worker.submit(gate, nbytes=60)
    assert gate.started.wait(TIMEOUT)
    thread, errors = run_in_thread(lambda: worker.submit(ran.append, ("second",), nbytes=60))
    thread.join(0.2)
    assert thread.is_alive()  # 120 bytes would be over the bound
    gate.opened.set()
    thread.join(TIMEOUT)
    worker.submit(ran.append, ("large",), nbytes=10_000)  # alone in the queue: taken
    worker.drain()
    assert not errors and ran == ["second", "large"] and worker.waits >= 1
    worker.stop()


def test_a_job_error_is_raised_by_the_next_call_naming_the_job_and_later_jobs_run():
    worker, ran, gate = BackgroundWorker(max_items=10, max_bytes=1 << 20), [], Gate()

    def fail():
        raise OSError(28, "No space left on device", "/somewhere/events.out.tfevents.1")

    worker.submit(gate)  # holds the thread until all three are queued
    worker.submit(fail, what="add_histogram('w')")
    worker.submit(ran.append, (1,))
    gate.opened.set()
    with pytest.raises(OSError) as raised:
        worker.drain()
    assert raised.value.filename.endswith("tfevents.1") and ran == [1]
    assert "add_histogram('w')" in "".join(raised.value.__notes__)
    worker.drain()  # raised once, then gone
    assert worker.idle
    worker.stop()


def test_stop_runs_every_job_ends_the_thread_and_a_later_submit_starts_one_again():
    worker, ran = BackgroundWorker(max_items=10, max_bytes=1 << 20, name="test-worker"), []
    for i in range(20):
        worker.submit(ran.append, (i,))
    worker.stop()
    assert ran == list(range(20))
    assert not [t for t in threading.enumerate() if t.name == "test-worker"]
    worker.submit(ran.append, (20,))
    worker.stop()
    assert ran[-1] == 20


def test_a_job_cannot_wait_for_its_own_queue():
    worker = BackgroundWorker(max_items=10, max_bytes=1 << 20)
    worker.submit(worker.drain)
    with pytest.raises(RuntimeError, match="cannot wait"):
        worker.drain()
    worker.stop()


def test_bad_bounds_are_rejected():
    with pytest.raises(ValueError, match="max_queue_bytes must be at least 1, got 0"):
        SummaryWriter(os.devnull + "-never-created", max_queue_bytes=0)


# -- the SummaryWriter on top of it ---------------------------------------------------------

def log_everything(writer, image, values):
    for step in range(6):
        writer.add_scalar("loss", 1.0 / (step + 1), step, walltime=100.0 + step)
        writer.add_histogram("w", values * (step + 1), step, walltime=100.0 + step)
        writer.add_histogram("w30", values, step, bins=30, max_bins=7, walltime=100.0 + step)
        writer.add_histogram("bad", np.array([1.0, np.nan, 2.0]), step, walltime=100.0 + step)
        writer.add_histogram("w2", values, step, also_tags=("w3",), walltime=100.0 + step)
        writer.add_scalar_from("norm", _norm, (values, values * step), step,
                               walltime=100.0 + step)
        writer.add_image("img", image, step, walltime=100.0 + step)
        writer.add_scalars("pair", {"a": step, "b": -step}, step, walltime=100.0 + step)
        writer.add_text("note", f"step **{step}**", step, walltime=100.0 + step)
    writer.add_video("clip", np.zeros((1, 2, 3, 4, 4), np.uint8), 6, walltime=200.0)
    writer.add_pr_curve("pr", np.array([0, 1, 1]), np.array([0.2, 0.9, 0.6]), 6,
                        walltime=200.0)


def payloads(log_dir):
    """Every record after the header (whose wall time differs between two files)."""
    (path,) = event_files(log_dir)
    records, torn = strict_records(path)
    assert torn == 0
    return records[1:]


def test_the_background_writer_writes_the_synchronous_writers_files(tmp_path):
    image = np.random.default_rng(0).random((3, 16, 12)).astype(np.float32)
    values = np.random.default_rng(1).standard_normal(5000).astype(np.float32)
    for background in (True, False):
        with pytest.warns(RuntimeWarning, match="'bad'"):  # by close() at the latest
            with SummaryWriter(tmp_path / str(background), background=background) as writer:
                log_everything(writer, image, values)
    assert payloads(tmp_path / "True") == payloads(tmp_path / "False")
    for sub_run in ("pair_a", "pair_b"):
        assert (payloads(tmp_path / "True" / sub_run) == payloads(tmp_path / "False" / sub_run))
    steps = [e.step for e in map(Event.FromString, payloads(tmp_path / "True"))]
    assert steps == sorted(steps) and len(steps) == 6 * 8 + 2


def test_values_are_copied_at_the_call(log_dir):
    values = np.arange(1000, dtype=np.float32)
    tensor = gl.ones(100)
    image = np.zeros((3, 4, 4), dtype=np.uint8)
    with SummaryWriter(log_dir) as writer:
        writer.add_histogram("array", values, 0)
        values[:] = -1.0  # the next step's update, in place
        writer.add_histogram("tensor", tensor, 0)
        with gl.no_grad():
            tensor.mul_(5)
        writer.add_image("image", image, 0)
        image[:] = 255
    histograms = {v.tag: v.histo for e in read_events(log_dir) for v in e.summary.value
                  if v.HasField("histo")}
    assert (histograms["array"].min, histograms["array"].max) == (0.0, 999.0)
    assert (histograms["tensor"].min, histograms["tensor"].max) == (0.5, 1.5)  # all ones
    (png,) = [v.image.encoded_image_string for e in read_events(log_dir)
              for v in e.summary.value if v.HasField("image")]
    import io

    from PIL import Image
    assert np.asarray(Image.open(io.BytesIO(png))).max() == 0


def _bytes_allocated_by(function) -> int:
    """The peak of what ``function`` allocates on this thread (numpy reports its buffers)."""
    import tracemalloc
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_values_handed_over_with_copy_false_are_not_copied_and_logged_the_same(log_dir):
    values = np.linspace(-1.0, 1.0, 1 << 18, dtype=np.float32)  # 1 MiB
    with SummaryWriter(log_dir) as writer:
        writer.add_histogram("warm", values, 0)  # (the thread and its buffers exist)
        writer.flush()
        copied = _bytes_allocated_by(lambda: writer.add_histogram("copied", values, 1))
        writer.flush()  # (the thread idle: only the call's own allocations are measured)
        handed = _bytes_allocated_by(lambda: writer.add_histogram("handed", values, 1,
                                                                  copy=False))
    assert copied >= values.nbytes > 20 * handed
    histograms = {v.tag: v.histo for e in read_events(log_dir) for v in e.summary.value
                  if v.HasField("histo")}
    assert histograms["handed"] == histograms["copied"]
    assert histograms["handed"].num == values.size


def _norm(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b))


def test_a_scalar_from_arrays_is_computed_from_copies_taken_at_the_call(log_dir):
    values, tensor = np.arange(4, dtype=np.float32), gl.ones(4)
    with SummaryWriter(log_dir) as writer:
        writer.add_scalar_from("norm", _norm, (values, tensor), 3)
        values[:] = 1.0  # changed in place before the thread gets to the job
        writer.add_scalar_from("nothing", lambda a: None, (values,), 4)
        writer.add_scalar_from("after", _norm, (values, tensor), 5)
    assert scalar_points(log_dir, "norm") == [(3, pytest.approx(np.sqrt(1 + 0 + 1 + 4)))]
    assert scalar_points(log_dir, "after") == [(5, 0.0)]
    assert scalar_points(log_dir, "nothing") == []


def test_an_error_computing_a_scalar_is_raised_by_a_later_call_naming_it(log_dir):
    writer = SummaryWriter(log_dir)
    writer.add_scalar_from("ratio", lambda a: 1 / 0, (np.zeros(3),), 0)
    with pytest.raises(ZeroDivisionError) as raised:
        writer.flush()
    assert "add_scalar_from('ratio')" in "".join(raised.value.__notes__)
    writer.close()


@pytest.mark.parametrize("background", [True, False])
def test_scalars_from_one_function_are_one_event(log_dir, background):
    a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    with SummaryWriter(log_dir, background=background) as writer:
        writer.add_scalars_from(["n/a", "n/none", "n/b"],
                                lambda x, y: (float(x.sum()), None, float(y.sum())), (a, b), 7)
        a[:] = 0.0  # the copies were taken at the call
        writer.add_scalars_from([], lambda: (), (), 8)  # no tags: nothing
    (event,) = [e for e in read_events(log_dir) if e.summary.value]
    assert event.step == 7
    assert [(v.tag, v.simple_value) for v in event.summary.value] == [("n/a", 6.0), ("n/b", 4.0)]


def test_scalars_from_a_function_returning_the_wrong_count_is_an_error_naming_it(log_dir):
    writer = SummaryWriter(log_dir)
    writer.add_scalars_from(["x", "y"], lambda a: (1.0,), (np.zeros(3),), 0)
    with pytest.raises(ValueError, match="returned 1 values for 2 tags") as raised:
        writer.flush()
    assert "add_scalars_from('x', ... 2 tags)" in "".join(raised.value.__notes__)
    writer.close()


def test_pytorch_tensors_are_copied_at_the_call(log_dir):
    torch = pytest.importorskip("torch")
    weight = torch.zeros(50, requires_grad=True)
    with SummaryWriter(log_dir) as writer:
        writer.add_histogram("w", weight, 0)  # numpy shares the tensor's memory
        with torch.no_grad():
            weight.add_(7.0)
    (histo,) = [v.histo for e in read_events(log_dir) for v in e.summary.value
                if v.HasField("histo")]
    assert (histo.min, histo.max) == (-0.5, 0.5)


def test_bad_input_is_rejected_at_the_call(log_dir):
    with SummaryWriter(log_dir) as writer:
        with pytest.raises(ValueError, match="empty"):
            writer.add_histogram("h", np.array([]), 0)
        with pytest.raises(ValueError, match="monotonically"):
            writer.add_histogram("h", np.arange(3.0), 0, bins=[2.0, 1.0])
        with pytest.raises(ValueError, match="max_bins must be at least 1"):
            writer.add_histogram("h", np.arange(3.0), 0, max_bins=0)
        with pytest.raises(ValueError, match="dataformats"):
            writer.add_image("i", np.zeros((4, 4)), 0, dataformats="CHW")
        with pytest.raises(ValueError, match="fps must be positive"):
            writer.add_video("v", np.zeros((1, 2, 3, 4, 4)), 0, fps=0)
        writer.add_scalar("after", 1.0, 0)  # the writer is still fine
    assert scalar_points(log_dir, "after") == [(0, 1.0)]


def fail_writes(monkeypatch, path_part="tfevents"):
    real_write = os.write
    fds = set()

    def write(fd, data):
        if fd in fds:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(event_file.os, "write", write)
    return fds, real_write


def test_a_write_error_surfaces_on_the_next_call_naming_the_file(log_dir, monkeypatch):
    writer = SummaryWriter(log_dir, max_queue=1)
    path = writer.file_writer.event_writer.path
    fds, real_write = fail_writes(monkeypatch)
    fds.add(writer.file_writer.event_writer._stream._fd)
    writer.add_histogram("h", np.arange(10.0), 0)  # the worker's write fails
    with pytest.raises(OSError, match="No space left") as raised:
        writer.flush()
    assert raised.value.filename == path
    assert "add_histogram('h')" in "".join(getattr(raised.value, "__notes__", []))
    monkeypatch.setattr(event_file.os, "write", real_write)  # space again: nothing lost
    writer.add_scalar("s", 1.0, 1)
    writer.close()
    tags = [v.tag for e in read_events(log_dir) for v in e.summary.value]
    assert tags == ["h", "s"]


def test_an_encoding_error_surfaces_with_the_call_that_caused_it(log_dir, monkeypatch):
    from gradlog.tensorboard import image

    def broken(tag, pixels):
        raise MemoryError("encoder out of memory")

    monkeypatch.setattr(image, "pixels_summary", broken)
    writer = SummaryWriter(log_dir)
    writer.add_image("picture", np.zeros((3, 2, 2)), 0)
    with pytest.raises(MemoryError) as raised:
        writer.flush()  # (or any call after the job ran)
    assert "add_image('picture')" in "".join(raised.value.__notes__)
    writer.add_histogram("h", np.arange(3.0), 0)  # raised once, then the writer goes on
    writer.close()
    assert [v.tag for e in read_events(log_dir) for v in e.summary.value] == ["h"]


def slow_histograms(monkeypatch):
    """Histogram jobs wait for the returned gate; returns it."""
    gate, real = Gate(), writer_module.histogram_proto

    def slow(*args):
        gate()
        return real(*args)

    monkeypatch.setattr(writer_module, "histogram_proto", slow)
    return gate


def test_queue_waits_are_counted_while_the_worker_is_behind(log_dir, monkeypatch):
    gate = slow_histograms(monkeypatch)
    writer = SummaryWriter(log_dir, max_queue=2)
    writer.add_histogram("h", np.arange(4.0), 0)
    assert gate.started.wait(TIMEOUT)
    writer.add_histogram("h", np.arange(4.0), 1)
    assert writer.queue_waits == 0
    thread, errors = run_in_thread(lambda: writer.add_scalar("s", 1.0, 2))
    thread.join(0.2)
    assert thread.is_alive()  # the scalar waits its turn behind two histograms
    gate.opened.set()
    thread.join(TIMEOUT)
    writer.close()
    assert not errors and writer.queue_waits == 1 and writer.queue_wait_seconds > 0
    events = [(e.step, v.tag) for e in read_events(log_dir) for v in e.summary.value]
    assert events == [(0, "h"), (1, "h"), (2, "s")]


def test_max_queue_bytes_bounds_the_copies_waiting(log_dir, monkeypatch):
    gate = slow_histograms(monkeypatch)
    writer = SummaryWriter(log_dir, max_queue=100, max_queue_bytes=10_000)
    writer.add_histogram("h", np.zeros(1000), 0)  # 8,000 bytes
    assert gate.started.wait(TIMEOUT)
    thread, errors = run_in_thread(lambda: writer.add_histogram("h", np.zeros(1000), 1))
    thread.join(0.2)
    assert thread.is_alive()
    gate.opened.set()
    thread.join(TIMEOUT)
    writer.close()
    assert not errors and writer.queue_waits == 1
    assert [e.step for e in read_events(log_dir) if e.summary.value] == [0, 1]


def test_scalars_alone_never_start_the_thread(log_dir):
    gc.collect()
    before = len(writer_threads())
    with SummaryWriter(log_dir) as writer:
        for step in range(100):
            writer.add_scalar("loss", float(step), step)
        assert len(writer_threads()) == before
        writer.add_histogram("h", np.arange(3.0), 0)
        writer.flush()
        assert len(writer_threads()) == before + 1
    assert len(writer_threads()) == before  # close() ends it


def test_a_dropped_writer_lets_its_thread_end(log_dir):
    gc.collect()
    before = len(writer_threads())
    writer = SummaryWriter(log_dir)
    writer.add_histogram("h", np.arange(3.0), 0)
    writer.flush()
    assert len(writer_threads()) == before + 1
    del writer
    gc.collect()
    for thread in writer_threads()[before:]:
        thread.join(TIMEOUT)
    assert len(writer_threads()) == before
    assert [v.tag for e in read_events(log_dir) for v in e.summary.value] == ["h"]


def test_training_with_the_histogram_plugin_logging_in_the_background_is_bit_identical(tmp_path):
    from gradlog import nn, optim

    def train(logdir):
        gl.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = gl.randn(32, 8), gl.randint(0, 3, (32,))
        losses = []
        run = gl.watch(model, opt, logdir=logdir, plugins=["histogram:every=1"]) \
            if logdir else None
        for _ in range(8):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if run is not None:
            run.close()
        return losses

    assert train(str(tmp_path / "run")) == train(None)
    steps = {e.step for e in read_events(tmp_path / "run") for v in e.summary.value
             if v.tag == "histogram/grad/0.weight"}
    assert steps == set(range(8))


def test_a_job_error_met_by_the_idle_flusher_is_raised_by_the_writers_next_call(tmp_path):
    from gradlog.tensorboard.queued import QueuedWriter

    class SegmentWaiting:  # an event file whose closed segment waits for its upload
        log_dir = str(tmp_path)
        upload_due = True
        uploads = 0

        def take_upload(self) -> bool:
            due, self.upload_due = self.upload_due, False
            return due

        def upload(self) -> None:
            self.uploads += 1

        def flush(self) -> None:
            pass

    def fails():
        raise ValueError("the histogram job failed")

    worker = BackgroundWorker(max_items=4, max_bytes=1 << 20)
    worker.submit(fails, (), 0, "add_histogram('h')")
    deadline = time.monotonic() + 30
    while worker.pending:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    below = SegmentWaiting()
    queued = QueuedWriter(below, worker)
    queued.flush_if_due()  # (the idle flusher's thread: the upload's submit meets the error)
    with pytest.raises(ValueError, match="the histogram job failed"):
        queued.flush()  # kept for the writer's next call, not lost with the flusher's thread
    below.upload_due = True  # the error was raised once; the next upload goes to the worker
    queued.flush_if_due()
    worker.drain()
    assert below.uploads == 1
    worker.stop()
