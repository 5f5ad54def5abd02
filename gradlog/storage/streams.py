"""Append-only streams of records at a location, behind one interface: what an event file
writes to, wherever its directory is.

* :class:`LocalFile` (local paths and ``file://``): one new file, created with ``O_EXCL`` and
  appended to with ``os.write``.
* :class:`AppendableFile` (fsspec filesystems that can append, ``memory://``): one file,
  appended to at each write.
* :class:`Segments` (object stores: every other protocol): objects cannot be appended to, so
  the records go to *segments*: immutable objects with increasing names, each a complete file.
  The open segment is written to a local spool file (:mod:`.spool`); it is closed when it is
  ``max_age`` seconds old or ``max_bytes`` large and on :meth:`~Segments.end_segment`, and
  uploaded whole in one request by :meth:`~Segments.upload`: a reader never sees a partial
  object, and TensorBoard reads a directory's event files in name order. Uploads are retried
  (:data:`.retries.RETRY_DELAYS`); one that still fails makes the stream stop uploading:
  every later segment stays in the spool too, and the error (an ``OSError`` naming the URL
  and the spool) is raised again by every later upload.

Every stream starts with (and every segment starts with) the record ``header()`` returns.

The interface, all of it on every stream:

* ``path``: the file (for segments: the URL of the open or last one);
* ``written``: how many bytes :meth:`append` has taken so far (after an ``OSError`` the caller
  retries only what did not go out);
* ``append(data)``, ``end_segment()``, ``make_durable()`` (fsync), ``close()``;
* ``due()``: when the open segment must end (None: never); ``upload_due``,
  ``claim_upload()`` (the caller will call ``upload()``, so nobody else need) and ``upload()``,
  which never runs under the caller's lock: the network is slow;
* ``positions(since_step)``: ``{name: bytes}`` that a reader will find, for a checkpoint;
* ``abandon()``: in a forked child, let go of the parent's file without touching it.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import posixpath
import struct
import threading
import time
from collections.abc import Callable

from .atomic import fsync_directory, with_path
from .locations import appendable, filesystem, is_url, join, local_path
from .retries import UploadError, with_retries
from .spool import spool_dir, unsent

__all__ = ["open_stream", "LocalFile", "AppendableFile", "Segments", "SEGMENT_BYTES"]

SEGMENT_BYTES = 8 << 20  # a segment is closed once it holds this much
_OPEN_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_unpack_length = struct.Struct("<Q").unpack_from


def open_stream(directory: str, new_name: Callable[[], str], header: Callable[[], bytes],
                max_age: float):
    """The stream for a new file in ``directory`` (which exists, if local): named by
    ``new_name()`` (names sort in the order they are made), starting with ``header()``;
    segments end ``max_age`` seconds after they open."""
    if not is_url(directory):
        return LocalFile(local_path(directory), new_name, header)
    if appendable(directory):
        return AppendableFile(directory, new_name, header)
    return Segments(directory, new_name, header, max_age)


def _write_all(fd: int, data: bytes, path: str) -> int:
    """Write ``data``; returns its length. An ``OSError`` names ``path`` and carries in
    ``written`` how much went out before it."""
    written = 0
    try:
        while written < len(data):
            written += os.write(fd, memoryview(data)[written:])
    except OSError as error:
        named = with_path(error, path)
        named.written = written
        raise named from error
    return written


class _Whole:
    """What a stream without segments does for the parts of the interface about them."""

    upload_due = False

    def end_segment(self) -> None:
        pass

    def due(self) -> float | None:
        return None

    def claim_upload(self) -> None:
        pass

    def upload(self) -> None:
        pass

    def positions(self, since_step: int | None = None) -> dict[str, int]:
        return {posixpath.basename(self.path.replace(os.sep, "/")): self.written}


class LocalFile(_Whole):
    """One new local file (``O_EXCL``: never one another writer has, never an old one)."""

    def __init__(self, directory: str, new_name: Callable[[], str],
                 header: Callable[[], bytes]) -> None:
        for _ in range(1000):
            path = os.path.join(directory, new_name())
            try:
                fd = os.open(path, _OPEN_FLAGS, 0o666)
            except FileExistsError:
                continue
            except OSError as error:
                raise with_path(error, path) from error
            break
        else:  # pragma: no cover - a thousand live collisions means something else is wrong
            raise FileExistsError(f"no free event file name in {directory}")
        self.path, self._fd, self._directory = path, fd, directory
        self.written = 0
        self._directory_synced = False
        try:
            self.append(header())
        except OSError:
            os.close(fd)
            raise

    def append(self, data: bytes) -> None:
        try:
            self.written += _write_all(self._fd, data, self.path)
        except OSError as error:
            self.written += error.written
            raise

    def make_durable(self) -> None:
        """fsync the file (the first time also its directory, which holds its name)."""
        if self._fd is None:  # closed: close() wrote everything
            return
        try:
            os.fsync(self._fd)
            if not self._directory_synced:
                fsync_directory(self._directory)
                self._directory_synced = True
        except OSError as error:
            raise with_path(error, self.path) from error

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError as error:
                raise with_path(error, self.path) from error

    def abandon(self) -> None:
        with contextlib.suppress(OSError):  # the child's copy; the parent's stays open
            self.close()


class AppendableFile(_Whole):
    """One file on an fsspec filesystem that can append (``memory://``)."""

    def __init__(self, url: str, new_name: Callable[[], str],
                 header: Callable[[], bytes]) -> None:
        self._fs, directory = filesystem(url)
        self._fs.makedirs(directory, exist_ok=True)
        for _ in range(1000):
            self._key = posixpath.join(directory, new_name())
            if not self._fs.exists(self._key):
                break
        self.path = join(url, posixpath.basename(self._key))
        self._fs.pipe_file(self._key, b"")
        self.written = 0
        self.append(header())

    def append(self, data: bytes) -> None:
        try:
            with self._fs.open(self._key, "ab") as f:
                f.write(data)
        except OSError as error:
            raise type(error)(error.errno, error.strerror or str(error), self.path) from error
        self.written += len(data)

    def make_durable(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abandon(self) -> None:
        pass


class _OpenSegment:
    __slots__ = ("name", "fd", "size", "opened")

    def __init__(self, name: str, fd: int) -> None:
        self.name, self.fd, self.size, self.opened = name, fd, 0, time.monotonic()


class Segments:
    """A sequence of immutable segment objects on an object store.

    Args:
        url: the directory.
        new_name: returns the next file name (they sort in the order they are made).
        header: returns the first record of each segment.
        max_age: close a segment this many seconds after it was opened.
        max_bytes: close a segment once it holds this many bytes.
        spool: where the open segment and unsent ones wait (default :func:`.spool.spool_dir`).

    The first segment opens at once (so a bad spool fails here). The caller serializes
    :meth:`append`, :meth:`end_segment` and :meth:`close`; :meth:`upload` has a lock of its
    own and may run on another thread.
    """

    def __init__(self, url: str, new_name: Callable[[], str], header: Callable[[], bytes],
                 max_age: float, max_bytes: int = SEGMENT_BYTES,
                 spool: str | None = None) -> None:
        self.url = url.rstrip("/")
        self._fs, self._root = filesystem(self.url)
        self.spool = spool or spool_dir(self.url)
        os.makedirs(self.spool, exist_ok=True)
        self._new_name, self._header = new_name, header
        self.max_age, self.max_bytes = float(max_age), int(max_bytes)
        self._ready: collections.deque[tuple[str, int]] = collections.deque()
        self._published: list[tuple[str, int, int]] = []  # (name, size, largest step)
        self._upload_lock = threading.Lock()
        self.error: UploadError | None = None  # set once uploading has failed for good
        self._claimed = False  # someone will call upload()
        self._closed = False
        self.written = 0
        self.last_name: str | None = None
        self._open: _OpenSegment | None = self._start()

    @property
    def path(self) -> str:
        """The URL of the open segment (or of the last one)."""
        return join(self.url, self.last_name or "")

    def append(self, data: bytes) -> None:
        """Add records to the open segment (opening one first if there is none)."""
        segment = self._open
        if segment is None:
            segment = self._open = self._start()
        try:
            done = _write_all(segment.fd, data, os.path.join(self.spool, segment.name))
        except OSError as error:
            segment.size += error.written
            self.written += error.written
            raise
        segment.size += done
        self.written += done
        if segment.size >= self.max_bytes:
            self.end_segment()

    def _start(self) -> _OpenSegment:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        for _ in range(1000):
            name = self._new_name()
            try:
                fd = os.open(os.path.join(self.spool, name), flags, 0o666)
            except FileExistsError:
                continue
            break
        else:  # pragma: no cover
            raise FileExistsError(f"no free segment name in {self.spool}")
        segment = _OpenSegment(name, fd)
        self.last_name = name
        segment.size = _write_all(fd, self._header(), os.path.join(self.spool, name))
        return segment

    def due(self) -> float | None:
        """When (``time.monotonic()``) the open segment must be closed; None if none is open.
        Segments waiting for an upload nobody claimed are due at once."""
        if self.upload_due:
            return 0.0
        return None if self._open is None else self._open.opened + self.max_age

    def end_segment(self) -> None:
        """Close the open segment; it waits in the spool for :meth:`upload`."""
        segment, self._open = self._open, None
        if segment is not None:
            os.close(segment.fd)
            self._ready.append((segment.name, segment.size))

    def make_durable(self) -> None:
        pass  # (what is uploaded is durable; the caller uploads)

    def close(self) -> None:
        self._closed = True
        self.end_segment()

    def abandon(self) -> None:
        pass  # the parent's segments stay the parent's

    @property
    def upload_due(self) -> bool:
        """Closed segments wait for :meth:`upload`, nobody claimed it, and uploading has not
        failed."""
        return bool(self._ready) and self.error is None and not self._claimed

    def claim_upload(self) -> None:
        self._claimed = True

    def upload(self) -> None:
        """Upload the closed segments, oldest first, each whole; raises the
        :class:`~.retries.UploadError` once an upload failed for good (they all stay in the
        spool). After :meth:`close`, the spool directory goes too once it is empty."""
        with self._upload_lock:
            self._claimed = False
            while self._ready:
                if self.error is not None:
                    raise self.error
                name, size = self._ready[0]
                local = os.path.join(self.spool, name)
                remote = posixpath.join(self._root, name)
                try:
                    with_retries(functools.partial(self._fs.put_file, local, remote), self.url)
                except OSError as error:
                    self.error = _spooled(error, self.url, self.spool)
                    raise self.error from error
                self._published.append((name, size, _largest_step(local)))
                os.remove(local)
                self._ready.popleft()
            if self._closed:
                try:
                    os.rmdir(self.spool)
                except OSError:
                    pass  # segments wait there, or another writer's

    def positions(self, since_step: int | None = None) -> dict[str, int]:
        """``{segment name: bytes}`` of the segments uploaded so far that hold events at steps
        ``>= since_step`` (all of them when None)."""
        return {name: size for name, size, largest in self._published
                if since_step is None or largest >= since_step}


def _spooled(error: OSError, url: str, spool: str) -> UploadError:
    reason = error.strerror or str(error)
    return UploadError(error.errno or 0, f"{reason}; {unsent(spool, url)}", url)


def _largest_step(path: str) -> int:
    """The largest ``Event.step`` in an event file this process wrote (so its records are
    whole and its fields in gradlog's order: ``wall_time`` (1, double), then ``step`` (2,
    varint), each left out when 0); read without parsing whole events."""
    with open(path, "rb") as f:
        data = f.read()
    largest, offset, end = 0, 0, len(data)
    while offset + 12 <= end:
        (length,) = _unpack_length(data, offset)
        i = offset + 12
        if data[i:i + 1] == b"\x09":  # wall_time
            i += 9
        if data[i:i + 1] == b"\x10":  # step
            step, shift = 0, 0
            while True:
                i += 1
                byte = data[i]
                step |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
            largest = max(largest, step)
        offset += 12 + length + 4
    return largest
