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
* **Places.** ``log_dir`` may also be a URL: the records go to a :mod:`gradlog.storage`
  stream, one interface for a local file, an appendable fsspec file (``memory://``) and an
  object store's segments (``s3://``, ``gs://``, ...), each a complete event file uploaded
  whole when it closes: ``flush_secs`` after it opened, once it is large, on ``flush()``,
  ``sync()``, ``close()``, exit and SIGINT/SIGTERM. Uploads run outside the writer's lock: by
  default in the thread that closed the segment (the caller's, or the idle flusher's); a
  layer above that has a thread for them (:class:`~.worker.QueuedWriter`) passes
  ``uploads_elsewhere=True`` and runs :meth:`EventFileWriter.upload` there itself.
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

import contextlib
import itertools
import os
import socket
import threading
import time

from tensorboard.compat.proto.event_pb2 import Event, SessionLog

from .. import storage
from ..storage.atomic import with_path
from . import lifecycle
from .lifecycle import critical
from .record import frame

__all__ = ["EventFileWriter"]

_counter = itertools.count()
_hostname: str | None = None
_PREFIX = "events.out.tfevents."


def _newest_event_file(directory: str) -> str:
    """The last event file name in ``directory`` in sorted order ("" when there is none)."""
    try:
        names = storage.names(directory)
    except OSError:
        return ""  # (creating the file then names the problem)
    return max((n for n in names if n.startswith(_PREFIX)), default="")


def _name(seconds: int, counter: int, suffix: str) -> str:
    return f"{_PREFIX}{seconds:010d}.{_hostname}.{os.getpid()}.{counter:06d}{suffix}"


def _seconds_of(name: str) -> int | None:
    field = name[len(_PREFIX):].partition(".")[0]
    return int(field) if field.isdigit() else None


class EventFileWriter:
    """Writes framed ``Event`` records to one new event file in ``log_dir``.

    Args:
        log_dir: the run directory; created if needed.
        max_queue: flush once this many events are pending.
        flush_secs: flush pending events at least this often (seconds).
        filename_suffix: appended to the file name.
        purge_step: write ``SessionLog.START`` at this step so TensorBoard hides the events of
            an earlier session at steps ``>= purge_step``.
        uploads_elsewhere: on an object store, leave the uploads of segments closed by their
            age or size to the caller (:meth:`take_upload`, :meth:`upload`), which has a
            thread for them; ``flush()``, ``sync()`` and ``close()`` upload before they
            return either way.
    """

    def __init__(self, log_dir, max_queue: int = 10, flush_secs: float = 120,
                 filename_suffix: str = "", purge_step: int | None = None, *,
                 uploads_elsewhere: bool = False) -> None:
        self.log_dir = os.fspath(log_dir)
        self._uploads_elsewhere = uploads_elsewhere
        self._max_queue = max(1, int(max_queue))
        self._flush_secs = float(flush_secs)
        self._suffix = filename_suffix
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self._stream = None
        self._closed = False
        self._error: OSError | None = None  # hit by the idle flusher; raised by the next call
        self._last_flush = time.monotonic()
        try:
            storage.makedirs(self.log_dir)
        except OSError as error:
            raise with_path(error, self.log_dir) from error
        self._last_name = _newest_event_file(self.log_dir)  # names sort after this
        self._header_step = purge_step or 0  # of the first file's (or segment's) header
        self._stream = self._open_stream()
        if purge_step is not None:  # twice: see "Restarts" above
            start = Event(wall_time=time.time(), step=int(purge_step),
                          session_log=SessionLog(status=SessionLog.START))
            self._pending += [frame(start.SerializeToString())] * 2
        try:
            self.flush()  # the run shows up at once, and a bad directory fails here
        except OSError:
            self._closed = True
            with contextlib.suppress(OSError):
                self._stream.close()
            raise
        lifecycle.register(self)

    @property
    def path(self) -> str | None:
        """The event file (for an object store: the URL of the open or last segment)."""
        stream = self._stream
        return None if stream is None else stream.path

    def _open_stream(self):
        return storage.open_stream(self.log_dir, self._new_name, self._header,
                                   self._flush_secs)

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

    def _header(self) -> bytes:
        step, self._header_step = self._header_step, 0
        header = Event(wall_time=time.time(), step=step, file_version="brain.Event:2")
        header.source_metadata.writer = "gradlog"
        return frame(header.SerializeToString())

    def write(self, payload: bytes) -> bool:
        """Queue one serialized ``Event``; flush if ``max_queue`` events are now pending.
        Returns whether closed segments now wait for the caller to upload them (claimed for
        it; only with ``uploads_elsewhere``: otherwise they are uploaded here)."""
        critical(self._lock, self._append, frame(payload))
        stream = self._stream
        if stream is not None and stream.upload_due:  # a segment reached its size bound
            if self._uploads_elsewhere:
                stream.claim_upload()
                return True
            stream.upload()
        return False

    def add_event(self, event: Event) -> None:
        """Queue an ``Event`` message."""
        self.write(event.SerializeToString())

    def write_later(self, make_payload, args: tuple, nbytes: int = 0, what: str = "") -> None:
        """Write the serialized ``Event`` that ``make_payload(*args)`` returns (None: nothing);
        here at once (a layer with a thread runs it there: ``nbytes`` and ``what`` are for it)."""
        payload = make_payload(*args)
        if payload is not None:
            self.write(payload)

    def flush(self) -> None:
        """Write every pending event to the file (the OS's cache; no fsync); on an object
        store, close the open segment and upload it."""
        critical(self._lock, self._flush)
        self.upload()

    def sync(self, since_step: int | None = None) -> dict[str, int]:
        """Flush, then fsync the file (the first time also its directory, which holds its
        name): everything written so far survives a power loss. On an object store, the open
        segment is uploaded. Returns ``{file name: bytes on disk}``: the file, or the
        segments uploaded so far that hold events at steps ``>= since_step``."""
        critical(self._lock, self._sync)
        self.upload()
        return self._stream.positions(since_step) if self._stream is not None else {}

    def close(self) -> None:
        """Flush and close the file. Idempotent; raises the first write error, if any."""
        try:
            critical(self._lock, self._close)
            self.upload()
        finally:
            lifecycle.unregister(self)

    @property
    def upload_due(self) -> bool:
        """Closed segments wait for an upload nobody has claimed."""
        stream = self._stream
        return stream is not None and stream.upload_due

    def take_upload(self) -> bool:
        """Claim the upload of the closed segments, if one is due: the caller then calls
        :meth:`upload`."""
        stream = self._stream
        if stream is None or not stream.upload_due:
            return False
        stream.claim_upload()
        return True

    def upload(self) -> None:
        """Upload the closed segments (object stores; outside the lock: the network is
        slow). Raises the upload's error."""
        stream = self._stream
        if stream is not None:
            stream.upload()

    @property
    def closed(self) -> bool:
        return self._closed

    def flush_due(self) -> float | None:
        """When (``time.monotonic()``) the pending events must be flushed, or the open
        segment closed; None if nothing is waiting."""
        due = None
        if self._pending and not self._closed:
            due = self._last_flush + self._flush_secs
        stream = self._stream
        if stream is not None:
            segment_due = stream.due()
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
                    if self._stream is not None:
                        self._stream.end_segment()
            if not self._uploads_elsewhere:
                self.upload()
        except OSError as error:
            with self._lock:
                if self._error is None:
                    self._error = error

    def after_fork_in_child(self) -> None:
        """In a forked child: the parent owns the queued records and the open file."""
        self._lock = threading.Lock()
        self._pending = []
        self._error = None
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.abandon()

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
        if self._stream is not None and not self._closed:
            self._stream.end_segment()

    def _sync(self) -> None:
        self._flush()
        if self._stream is not None:
            self._stream.make_durable()

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
            if self._stream is not None:
                try:
                    self._stream.close()
                except OSError as close_error:
                    error = error or close_error
        if error is not None:
            raise error

    def _raise_stored_error(self) -> None:
        error, self._error = self._error, None
        raise error

    def _write_pending(self) -> None:
        # One write per flush (more only on a short write); after an error, only what did
        # not go out is retried by the next flush.
        if self._stream is None:  # first write in a forked child
            self._stream = self._open_stream()
            lifecycle.register(self)
        pending, self._pending = self._pending, []
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        stream = self._stream
        before = stream.written
        try:
            stream.append(data)
        except OSError:
            self._pending = [data[stream.written - before:]]
            raise
        self._last_flush = time.monotonic()

    def __del__(self) -> None:
        # A writer the program dropped without close(): flush it rather than lose its events.
        if not getattr(self, "_closed", True):
            self.close()
