"""The event file: unique names, header records, the flush policy and write errors."""

import errno
import os
import pathlib
import re
import socket
import time
import types

import pytest
from tb_helpers import event_files, read_events, run_python, strict_records
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary

from gradlog.tensorboard import event_file
from gradlog.tensorboard.event_file import EventFileWriter


def scalar_event(step, value=1.0, tag="x"):
    return Event(step=step, wall_time=1.0 + step,
                 summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)]))


def records_on_disk(writer):
    return len(strict_records(writer.path)[0])


def test_name_has_time_host_pid_counter_and_suffix(log_dir):
    before = int(time.time())
    writer = EventFileWriter(log_dir, filename_suffix=".v2")
    after = time.time()
    pattern = (rf"events\.out\.tfevents\.(\d{{10}})\.{re.escape(socket.gethostname())}"
               rf"\.{os.getpid()}\.\d{{6}}\.v2")
    match = re.fullmatch(pattern, os.path.basename(writer.path))
    assert match and before <= int(match.group(1)) <= after  # however long creating took
    writer.close()


def test_many_writers_in_one_directory_in_one_second_never_collide(log_dir):
    writers = [EventFileWriter(log_dir) for _ in range(30)]
    for i, writer in enumerate(writers):
        writer.add_event(scalar_event(i, tag=f"w{i}"))
    for writer in writers:
        writer.close()
    files = event_files(log_dir)
    assert len(files) == 30 and files == [w.path for w in writers]  # names sort by creation
    for i, path in enumerate(files):
        assert [v.tag for e in read_events(path) for v in e.summary.value] == [f"w{i}"]


def test_an_existing_file_is_never_appended_to(log_dir, monkeypatch):
    first = EventFileWriter(log_dir)
    first.close()
    before = pathlib.Path(first.path).read_bytes()
    used = int(first.path.rsplit(".", 1)[1])
    seconds = float(os.path.basename(first.path).split(".")[3])
    # Same second, and the counter hands out the used number twice: the name is taken (as by
    # another writer after this one listed the directory).
    monkeypatch.setattr(event_file, "_counter", iter([used, used, 999_999]))
    monkeypatch.setattr(event_file, "_newest_event_file", lambda directory: "")
    monkeypatch.setattr(event_file, "time", types.SimpleNamespace(
        time=lambda: seconds, monotonic=time.monotonic))
    second = EventFileWriter(log_dir)
    second.close()
    assert second.path > first.path and pathlib.Path(first.path).read_bytes() == before


def test_a_new_file_sorts_after_another_process_file_of_the_same_second(log_dir, monkeypatch):
    # A run killed and resumed within one second: the killed process's pid may sort after the
    # new one's ("997" > "1005"). TensorBoard reads a directory's files in name order, so the
    # resumed file must come last, or its purge of the old steps would be read first.
    killed = EventFileWriter(log_dir)
    killed.add_event(scalar_event(4, value=1.0))
    killed.close()
    seconds = int(os.path.basename(killed.path).split(".")[3])
    later_pid = os.path.join(log_dir, f"events.out.tfevents.{seconds:010d}.{socket.gethostname()}"
                                      f".{'9' * 12}.000000")
    os.rename(killed.path, later_pid)
    monkeypatch.setattr(event_file, "time", types.SimpleNamespace(
        time=lambda: seconds + 0.5, monotonic=time.monotonic))
    resumed = EventFileWriter(log_dir, purge_step=4)
    resumed.add_event(scalar_event(4, value=2.0))
    resumed.close()
    again = EventFileWriter(log_dir)  # this process's next file, in the same second
    again.close()
    assert event_files(log_dir) == [later_pid, resumed.path, again.path]
    assert int(os.path.basename(resumed.path).split(".")[3]) == seconds + 1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    accumulator = EventAccumulator(log_dir)
    accumulator.Reload()
    assert [(e.step, e.value) for e in accumulator.Scalars("x")] == [(4, 2.0)]


def test_header_is_file_version_alone_without_purge_step(log_dir):
    writer = EventFileWriter(log_dir)
    writer.close()
    (header,) = read_events(writer.path)
    assert header.file_version == "brain.Event:2" and header.source_metadata.writer == "gradlog"
    again = EventFileWriter(log_dir)  # a second file in the directory: no START either
    again.close()
    assert [e.WhichOneof("what") for e in read_events(again.path)] == ["file_version"]


def test_purge_step_writes_start_twice_after_the_header(log_dir):
    EventFileWriter(log_dir).close()
    resumed = EventFileWriter(log_dir, purge_step=7)
    resumed.close()
    header, *starts = read_events(resumed.path)
    assert header.file_version and len(starts) == 2
    assert all(s.session_log.status == SessionLog.START and s.step == 7 for s in starts)


def test_events_wait_until_max_queue_are_pending(log_dir):
    writer = EventFileWriter(log_dir, max_queue=5)
    on_disk = records_on_disk(writer)  # the header is flushed at once
    for step in range(4):
        writer.add_event(scalar_event(step))
    assert records_on_disk(writer) == on_disk
    writer.add_event(scalar_event(4))
    assert records_on_disk(writer) == on_disk + 5
    writer.add_event(scalar_event(5))
    writer.flush()
    assert records_on_disk(writer) == on_disk + 6
    writer.close()


def test_idle_events_are_flushed_after_flush_secs(log_dir):
    writer = EventFileWriter(log_dir, max_queue=1000, flush_secs=0.2)
    on_disk = records_on_disk(writer)
    writer.add_event(scalar_event(0))
    assert records_on_disk(writer) == on_disk
    deadline = time.monotonic() + 60  # a bound for a hang, not a speed
    while records_on_disk(writer) == on_disk and time.monotonic() < deadline:
        time.sleep(0.05)
    assert records_on_disk(writer) == on_disk + 1
    writer.close()


def test_close_flushes_is_idempotent_and_later_writes_fail(log_dir):
    writer = EventFileWriter(log_dir, max_queue=100)
    writer.add_event(scalar_event(0))
    writer.close()
    writer.close()
    assert [e.step for e in read_events(writer.path) if e.summary.value] == [0]
    with pytest.raises(ValueError, match="closed"):
        writer.add_event(scalar_event(1))


def test_a_dropped_writer_flushes_its_events(log_dir):
    writer = EventFileWriter(log_dir, max_queue=100)
    writer.add_event(scalar_event(3))
    path = writer.path
    del writer
    assert [e.step for e in read_events(path) if e.summary.value] == [3]


def _fail_writes_to(writer, monkeypatch, error=errno.ENOSPC, after=0):
    """Make os.write fail on ``writer``'s file only, after ``after`` more bytes succeed."""
    real_write, budget = os.write, [after]

    def write(fd, data):
        if fd != writer._stream._fd:
            return real_write(fd, data)
        if budget[0] <= 0:
            raise OSError(error, os.strerror(error))
        n = real_write(fd, bytes(data)[:budget[0]])
        budget[0] -= n
        return n

    monkeypatch.setattr(event_file.os, "write", write)
    return real_write


def test_disk_full_raises_oserror_naming_the_file_on_the_call_that_hit_it(log_dir, monkeypatch):
    writer = EventFileWriter(log_dir, max_queue=3)
    real_write = _fail_writes_to(writer, monkeypatch)
    writer.add_event(scalar_event(0))
    writer.add_event(scalar_event(1))
    with pytest.raises(OSError, match="No space left") as raised:
        writer.add_event(scalar_event(2))  # the third pending event triggers the write
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == writer.path
    with pytest.raises(OSError) as raised:
        writer.flush()
    assert raised.value.filename == writer.path
    monkeypatch.setattr(event_file.os, "write", real_write)  # space again: nothing was lost
    writer.close()
    assert [e.step for e in read_events(writer.path) if e.summary.value] == [0, 1, 2]


def test_a_short_write_leaves_no_torn_record_in_the_middle(log_dir, monkeypatch):
    writer = EventFileWriter(log_dir, max_queue=100)
    for step in range(10):
        writer.add_event(scalar_event(step))
    real_write = _fail_writes_to(writer, monkeypatch, after=37)  # dies inside a record
    with pytest.raises(OSError):
        writer.flush()
    monkeypatch.setattr(event_file.os, "write", real_write)
    for step in range(10, 13):
        writer.add_event(scalar_event(step))
    writer.close()
    payloads, torn = strict_records(writer.path)  # every CRC checks out
    assert torn == 0 and [Event.FromString(p).step for p in payloads[1:]] == list(range(13))


def test_close_raises_the_write_error_and_still_closes(log_dir, monkeypatch):
    writer = EventFileWriter(log_dir, max_queue=100)
    writer.add_event(scalar_event(0))
    _fail_writes_to(writer, monkeypatch, error=errno.EIO)
    with pytest.raises(OSError, match="Input/output error") as raised:
        writer.close()
    assert raised.value.filename == writer.path and writer.closed
    writer.close()  # idempotent, no second error


def test_an_error_in_the_idle_flusher_is_raised_by_the_next_call(log_dir, monkeypatch):
    writer = EventFileWriter(log_dir, max_queue=1000, flush_secs=0.1)
    real_write = _fail_writes_to(writer, monkeypatch)
    writer.add_event(scalar_event(0))
    deadline = time.monotonic() + 60  # a bound for a hang, not a speed
    while writer._error is None and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(OSError) as raised:
        writer.add_event(scalar_event(1))
    assert raised.value.filename == writer.path
    monkeypatch.setattr(event_file.os, "write", real_write)
    writer.close()
    assert [e.step for e in read_events(writer.path) if e.summary.value] == [0]


def test_unwritable_directory_raises_naming_the_path(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError) as raised:
        EventFileWriter(str(blocker / "run"))
    assert str(blocker) in str(raised.value)
    real_open = os.open

    def denied(path, *args, **kwargs):
        if "tfevents" in str(path):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(event_file.os, "open", denied)
    with pytest.raises(PermissionError) as raised:
        EventFileWriter(str(tmp_path / "run"))
    assert "tfevents" in raised.value.filename


@pytest.mark.skipif(not hasattr(os, "fork"), reason="RLIMIT_FSIZE is POSIX")
def test_a_real_kernel_write_error_is_raised_with_the_path(tmp_path):
    # RLIMIT_FSIZE makes the kernel refuse writes past 4 KiB (EFBIG); no monkeypatching.
    result = run_python("""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        from gradlog.tensorboard import SummaryWriter
        writer = SummaryWriter(sys.argv[1], max_queue=1000)
        writer.add_text("big", "x" * 10000)
        try:
            writer.flush()
        except OSError as error:
            print(error.errno, error.filename)
            writer.file_writer.event_writer._pending.clear()  # let the process exit quietly
    """, str(tmp_path / "run"))
    code, filename = result.stdout.split()
    assert int(code) == errno.EFBIG and "tfevents" in filename


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_writes_its_own_file_and_never_the_parents_records(log_dir):
    result = run_python("""
        import os, sys
        from gradlog.tensorboard.event_file import EventFileWriter
        from tensorboard.compat.proto.event_pb2 import Event
        writer = EventFileWriter(sys.argv[1], max_queue=100)
        writer.add_event(Event(step=1))   # pending in the parent at fork time
        pid = os.fork()
        if pid == 0:
            writer.add_event(Event(step=2))
            writer.close()
            os._exit(0)
        os.waitpid(pid, 0)
        writer.close()
        print(writer.path)
    """, log_dir)
    parent_file = result.stdout.strip()
    files = event_files(log_dir)
    assert len(files) == 2 and parent_file in files
    child_file = next(f for f in files if f != parent_file)
    assert [e.step for e in read_events(parent_file) if not e.file_version] == [1]
    assert [e.step for e in read_events(child_file) if not e.file_version] == [2]
