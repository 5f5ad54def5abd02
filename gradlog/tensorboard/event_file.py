"""One event file: unique naming, a bounded in-memory queue, and the flush policy.

Guarantees (each tested):

* **Unique files.** The name is ``events.out.tfevents.<%010d seconds>.<host>.<pid>.<counter>``
  plus the suffix, with a zero-padded per-process counter, and the file is created with
  ``O_EXCL``: two writers in one directory in the same second, or two processes, never share a
  file, and a writer never appends to an old file (after a crash the next one starts a new file,
  so a torn last record is only ever at the end of a file). Names sort in creation order, which
  is the order TensorBoard's Python loader reads them in, also after another process's files
  of the same second (whose pid may sort later): a new file's name sorts after every event
  file already in the directory, its seconds moved on by one where needed.
* **Whole records.** Records are framed in full and leave the process in one ``os.write`` per
  flush, so a crash can tear at most the last record of the file, which both loaders tolerate.
* **Flushing.** Events wait in memory until ``max_queue`` are pending, ``flush_secs`` have passed
  (checked by :mod:`.lifecycle`'s idle flusher), or ``flush()``/``close()``/exit/SIGINT/SIGTERM.
  A SIGKILL therefore loses fewer than ``max_queue`` events, as with PyTorch.
* **Durability.** ``sync()`` flushes and fsyncs the file (and once its directory) and returns
  the file's size: what a checkpoint taken then may rely on surviving a power loss.
* **Places.** ``log_dir`` may also be a URL (:mod:`.storage`): an appendable fsspec filesystem
  (``memory://``) keeps one file, appended to at each flush; an object store (``s3://``,
  ``gs://``, ...) gets immutable segments, each a complete event file uploaded whole when it
  closes: ``flush_secs`` after it opened, once it is large, on ``flush()``, ``sync()``,
  ``close()``, exit and SIGINT/SIGTERM. Uploads run outside the writer's lock.
* **Errors surface.** An ``OSError`` names the file and is raised by the call that hit it, or by
  the next call if the idle flusher hit it. Unwritten bytes stay queued for the next flush.
* **Restarts.** The first record is ``file_version``. ``purge_step=T`` then writes
  ``SessionLog.START`` at ``T`` twice: TensorBoard's server loader takes a run's first
  ``START`` for the beginning of the run and purges steps ``>= T`` on a later one, the classic
  ``EventAccumulator`` purges on every one, so whatever the directory already holds, the
  earlier sessions' steps ``>= T`` are hidden on both. Without ``purge_step`` no ``START`` is
  written (as PyTorch): writers that share a directory, even two processes starting at the
  same moment, never hide each other's events.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time

from tensorboard.compat.proto.event_pb2 import Event, SessionLog

from . import lifecycle, storage
from .lifecycle import deferred_signals, enter_critical, leave_critical, main_thread
from .record import frame

__all__ = ["EventFileWriter"]

_counter = itertools.count()
_hostname: str | None = None
_OPEN_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_get_ident = threading.get_ident


def _with_path(error: OSError, path: str) -> OSError:
    """The same kind of ``OSError``, naming ``path`` (``os.write`` errors name no file)."""
    if error.filename is not None:
        return error
    return type(error)(error.errno, error.strerror or str(error), path)


_PREFIX = "events.out.tfevents."


def _newest_event_file(directory: str, url: bool) -> str:
    """The last event file name in ``directory`` in sorted order ("" when there is none)."""
    try:
        names = storage.names(directory) if url else os.listdir(directory)
    except OSError:
        return ""  # (creating the file then names the problem)
    return max((n for n in names if n.startswith(_PREFIX)), default="")


def _name(seconds: int, counter: int, suffix: str) -> str:
    return f"{_PREFIX}{seconds:010d}.{_hostname}.{os.getpid()}.{counter:06d}{suffix}"


def _seconds_of(name: str) -> int | None:
    field = name[len(_PREFIX):].partition(".")[0]
    return int(field) if field.isdigit() else None


def _fsync_directory(directory: str) -> None:
    # (as gradlog.serialization's, which this layer does not import: it sits below it)
    if os.name != "posix":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EventFileWriter:
    """Writes framed ``Event`` records to one new event file in ``log_dir``.

    Args:
        log_dir: the run directory; created if needed.
        max_queue: flush once this many events are pending.
        flush_secs: flush pending events at least this often (seconds).
        filename_suffix: appended to the file name.
        purge_step: write ``SessionLog.START`` at this step so TensorBoard hides the events of
            an earlier session at steps ``>= purge_step``.
        uploader: on an object store, the background worker (:mod:`.worker`) that uploads the
            segments closed by their age or size, in order with the writer's other jobs (None:
            the thread that closed them uploads them). ``flush()``, ``sync()`` and ``close()``
            upload before they return.
    """

    def __init__(self, log_dir, max_queue: int = 10, flush_secs: float = 120,
                 filename_suffix: str = "", purge_step: int | None = None,
                 uploader=None) -> None:
        self.log_dir = os.fspath(log_dir)
        self._uploader = uploader  # the writer's BackgroundWorker: uploads that need no wait
        self._url = storage.is_url(self.log_dir)
        self._dir = self.log_dir if self._url else storage.local_path(self.log_dir)
        self._remote: storage.AppendableFile | storage.Segments | None = None
        self._local_path: str | None = None
        self._max_queue = max(1, int(max_queue))
        self._flush_secs = float(flush_secs)
        self._suffix = filename_suffix
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self._fd: int | None = None
        self._size = 0  # bytes written to the file
        self._dir_synced = False
        self._closed = False
        self._error: OSError | None = None  # hit by the idle flusher; raised by the next call
        self._last_flush = time.monotonic()
        if not self._url:
            try:
                os.makedirs(self._dir, exist_ok=True)
            except OSError as error:
                raise _with_path(error, self.log_dir) from error
        self._last_name = _newest_event_file(self._dir, self._url)  # names sort after this
        self._open_file(step=purge_step or 0)
        if purge_step is not None:  # twice: see "Restarts" above
            start = Event(wall_time=time.time(), step=int(purge_step),
                          session_log=SessionLog(status=SessionLog.START))
            self._pending += [frame(start.SerializeToString())] * 2
        try:
            self.flush()  # the run shows up at once, and a bad directory fails here
        except OSError:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
            raise
        lifecycle.register(self)

    @property
    def path(self) -> str | None:
        """The event file (for an object store: the URL of the open or last segment)."""
        return self._remote.path if self._remote is not None else self._local_path

    def _new_name(self) -> str:
        global _hostname
        if _hostname is None:
            _hostname = socket.gethostname()
        counter, last = next(_counter), self._last_name
        seconds, newest = int(time.time()), _seconds_of(last)
        if newest is not None and newest >= seconds:  # the newest file's second, or a clock step
            seconds = newest if _name(newest, counter, self._suffix) > last else newest + 1
        name = _name(seconds, counter, self._suffix)
        self._last_name = max(name, last)
        return name

    @staticmethod
    def _header(step: int = 0) -> bytes:
        header = Event(wall_time=time.time(), step=step, file_version="brain.Event:2")
        header.source_metadata.writer = "gradlog"
        return frame(header.SerializeToString())

    def _open_file(self, step: int = 0) -> None:
        if self._url:
            return self._open_remote(step)
        for _ in range(1000):
            path = os.path.join(self._dir, self._new_name())
            try:
                self._fd = os.open(path, _OPEN_FLAGS, 0o666)
            except FileExistsError:
                continue
            except OSError as error:
                raise _with_path(error, path) from error
            break
        else:  # pragma: no cover - a thousand live collisions means something else is wrong
            raise FileExistsError(f"no free event file name in {self.log_dir}")
        self._local_path = path
        self._size, self._dir_synced = 0, False
        self._pending.insert(0, self._header(step))

    def _open_remote(self, step: int) -> None:
        if storage.appendable(self.log_dir):
            self._remote = storage.AppendableFile(self.log_dir, self._new_name)
            self._pending.insert(0, self._header(step))
        else:
            self._remote = storage.Segments(self.log_dir, self._new_name, self._header,
                                            self._flush_secs)
            self._remote.append(self._header(step))

    def _critical(self, operation, *args):
        # NOTE: the main thread is marked busy *before* it takes the lock and unmarked after it
        # lets go, so a signal handler (always on the main thread) never waits for a lock the
        # thread it interrupted holds: it defers the flush, and we run it here on the way out.
        main = enter_critical()
        try:
            with self._lock:
                return operation(*args)
        finally:
            leave_critical(main)

    def write(self, payload: bytes) -> None:
        """Queue one serialized ``Event``; flush if ``max_queue`` events are now pending."""
        # (self._critical(self._append, record), inlined: this is every add_scalar's path)
        record = frame(payload)
        main = _get_ident() == main_thread.ident
        if main:
            main_thread.busy += 1
        try:
            with self._lock:
                self._append(record)
        finally:
            if main:
                main_thread.busy -= 1
                if deferred_signals and not main_thread.busy:
                    lifecycle.run_deferred()
        if self._remote is not None and self._remote.upload_due:
            self._upload(wait=False)  # a segment reached its size bound

    def add_event(self, event: Event) -> None:
        """Queue an ``Event`` message."""
        self.write(event.SerializeToString())

    def flush(self) -> None:
        """Write every pending event to the file (the OS's cache; no fsync); on an object
        store, close the open segment and upload it."""
        self._critical(self._flush)
        self._upload()

    def sync(self, since_step: int | None = None) -> dict[str, int]:
        """Flush, then fsync the file (the first time also its directory, which holds its
        name): everything written so far survives a power loss. On an object store, the open
        segment is uploaded. Returns ``{file name: bytes on disk}``: the file, or the
        segments uploaded so far that hold events at steps ``>= since_step``."""
        positions = self._critical(self._sync)
        if self._remote is not None:
            self._upload()
            positions = self._remote.positions(since_step)
        return positions

    def close(self) -> None:
        """Flush and close the file. Idempotent; raises the first write error, if any."""
        try:
            self._critical(self._close)
            self._upload()
            if isinstance(self._remote, storage.Segments):
                self._remote.remove_empty_spool()
        finally:
            lifecycle.unregister(self)

    def _upload(self, wait: bool = True) -> None:
        # Outside the lock: the closed segments go to the object store, in order; on the
        # background worker when the caller need not wait and is not that worker itself.
        segments = self._remote
        if not isinstance(segments, storage.Segments):
            return
        uploader = self._uploader
        if wait or uploader is None or uploader.on_worker_thread():
            segments.upload_ready()
        elif not segments.upload_submitted:
            segments.upload_submitted = True
            uploader.submit(segments.upload_ready, (), 0, f"uploading to {segments.url}")

    @property
    def closed(self) -> bool:
        return self._closed

    def flush_due(self) -> float | None:
        """When (``time.monotonic()``) the pending events must be flushed, or the open
        segment closed; None if nothing is waiting."""
        due = None
        if self._pending and not self._closed:
            due = self._last_flush + self._flush_secs
        if isinstance(self._remote, storage.Segments):
            segment_due = self._remote.due()
            if segment_due is not None:
                due = segment_due if due is None else min(due, segment_due)
        return due

    def flush_if_due(self) -> None:
        """Called by the idle flusher thread; an error is kept for the writer's next call."""
        try:
            with self._lock:
                due = self.flush_due()
                if due is not None and due <= time.monotonic():
                    self._write_pending_if_any()
                    if isinstance(self._remote, storage.Segments):
                        self._remote.close_segment()
            self._upload(wait=False)
        except OSError as error:
            with self._lock:
                if self._error is None:
                    self._error = error

    def after_fork_in_child(self) -> None:
        """In a forked child: the parent owns the queued records and the open file."""
        self._lock = threading.Lock()
        self._pending = []
        self._error = None
        self._remote = None  # the parent's segments and file stay the parent's
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass  # the child's copy of the descriptor; the parent's stays open
            self._fd = None

    # The operations below run with the lock held.

    def _append(self, record: bytes) -> None:
        if self._error is not None:
            self._raise_stored_error()
        if self._closed:
            raise ValueError(f"event file {self.path} is closed")
        self._pending.append(record)
        if len(self._pending) >= self._max_queue:
            self._write_pending()

    def _write_pending_if_any(self) -> None:
        if self._pending and not self._closed:
            self._write_pending()

    def _flush(self) -> None:
        if self._error is not None:
            self._raise_stored_error()
        self._write_pending_if_any()
        if isinstance(self._remote, storage.Segments) and not self._closed:
            self._remote.close_segment()

    def _sync(self) -> dict[str, int]:
        self._flush()
        if self._fd is not None:
            try:
                os.fsync(self._fd)
                if not self._dir_synced:
                    _fsync_directory(self._dir)
                    self._dir_synced = True
            except OSError as error:
                raise _with_path(error, self.path) from error
        return {os.path.basename(self._local_path): self._size} if self._remote is None else {}

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        error, self._error = self._error, None
        try:
            if self._pending:
                self._write_pending()
        except OSError as write_error:
            error = error or write_error
        finally:
            self._pending = []
            if self._remote is not None:
                self._remote.close()
            if self._fd is not None:
                fd, self._fd = self._fd, None
                try:
                    os.close(fd)
                except OSError as close_error:
                    error = error or _with_path(close_error, self.path)
        if error is not None:
            raise error

    def _raise_stored_error(self) -> None:
        error, self._error = self._error, None
        raise error

    def _write_pending(self) -> None:
        # One os.write per flush (more only on a short write).
        if self._fd is None and self._remote is None:  # first write in a forked child
            self._open_file()
            lifecycle.register(self)
        pending, self._pending = self._pending, []
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        if self._remote is not None:
            try:
                self._remote.append(data)
            except OSError:
                self._pending = [data]  # retried by the next flush
                raise
            self._last_flush = time.monotonic()
            return
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, memoryview(data)[written:])
        except OSError as error:
            self._pending = [data[written:]]  # retried by the next flush
            self._size += written
            raise _with_path(error, self.path) from error
        self._size += written
        self._last_flush = time.monotonic()

    def __del__(self) -> None:
        # A writer the program dropped without close(): flush it rather than lose its events.
        if not getattr(self, "_closed", True):
            self.close()
