"""Where event files go: a local path, or any URL fsspec knows (``s3://``, ``gs://``,
``memory://``, ``file://``...), and what object stores need that disks do not.

* **Local paths** and ``file://`` URLs: the event file writer's own file, appended to at each
  flush (:mod:`.event_file`).
* **Appendable fsspec filesystems** (``memory://``): one file per writer too, appended to at each
  flush (:class:`AppendableFile`).
* **Object stores** (every other protocol): objects cannot be appended to, so events go to
  *segments* (:class:`Segments`): immutable objects with increasing names, each a complete event
  file. The open segment is written to a local *spool* file as the flush policy says; it is
  closed when it is ``max_age`` seconds old or ``max_bytes`` large, on ``flush()``, ``sync()``,
  ``close()`` and SIGINT/SIGTERM, and uploaded whole in one request: a reader never sees a
  partial object, and TensorBoard reads a directory's event files in name order.

Uploads are retried with a bounded backoff (:data:`RETRY_DELAYS`). One that still fails makes
the writer stop uploading: every later segment stays in the spool too, and the error (an
``OSError`` naming the URL and the spool) is raised by the writer's next call. ``gradlog sync
SPOOL URL`` (:func:`upload_spool`) uploads what a spool holds, oldest first.

Credentials and endpoints come from each backend's own configuration (for S3, the AWS variables
such as ``AWS_ENDPOINT_URL``, or fsspec's config); fsspec and its backends are imported only for
URLs (the ``gradlog[remote]`` extra).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import posixpath
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["is_url", "local_path", "join", "relative", "same_location", "filesystem",
           "UnknownProtocol", "process_local", "NotASpool", "check_spool", "unsent",
           "spool_holds_files", "cache_path",
           "appendable", "UploadError", "with_retries", "RETRY_DELAYS", "spool_dir",
           "upload_spool", "AppendableFile", "Segments", "SEGMENT_BYTES", "read_bytes",
           "publish_bytes", "exists", "isdir", "names", "remove", "download_event_files"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_LOCAL_PROTOCOLS = ("file", "local")
APPENDABLE_PROTOCOLS = ("memory",)
PROCESS_LOCAL_PROTOCOLS = ("memory",)
RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)  # seconds between the 5 tries of one upload
SEGMENT_BYTES = 8 << 20  # a segment is closed once it holds this much
_unpack_length = struct.Struct("<Q").unpack_from
# Errors no retry can mend: the bucket or the credentials are wrong, a conditional create
# found the object there.
_PERMANENT = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
              NotADirectoryError, ImportError, TypeError, ValueError)


def _protocol(location: str) -> str | None:
    match = _SCHEME.match(location)
    return match.group(1).lower() if match else None


def is_url(location) -> bool:
    """Whether ``location`` is a URL gradlog reaches through fsspec (``file://`` is a path)."""
    protocol = _protocol(os.fspath(location))
    return protocol is not None and protocol not in _LOCAL_PROTOCOLS


def local_path(location) -> str:
    """``location`` as a local path: ``file://`` (and ``local://``) stripped."""
    location = os.fspath(location)
    protocol = _protocol(location)
    if protocol in _LOCAL_PROTOCOLS:
        return location[len(protocol) + 3:]
    return location


def join(base, *names: str) -> str:
    """``base/name/...``: a URL joined with ``/``, a path with the platform's separator."""
    base = os.fspath(base)
    if is_url(base):
        protocol = _protocol(base)
        rest = posixpath.normpath(posixpath.join(base[len(protocol) + 3:], *names))
        return f"{protocol}://{rest.lstrip('/')}" if rest != "." else f"{protocol}://"
    return os.path.join(base, *names)


def relative(path: str, base: str) -> str:
    """``path`` relative to ``base``, with ``/`` ("" when they are the same)."""
    if is_url(path) or is_url(base):
        path, base = path.rstrip("/"), base.rstrip("/")
        if path == base:
            return ""
        if not path.startswith(base + "/"):
            raise ValueError(f"{path} is not inside {base}")
        return path[len(base) + 1:]
    rel = os.path.relpath(local_path(path), local_path(base))
    return "" if rel == "." else rel.replace(os.sep, "/")


def same_location(a: str, b: str) -> bool:
    """Whether two locations name the same directory."""
    if is_url(a) or is_url(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(local_path(a)) == os.path.realpath(local_path(b))


def filesystem(url: str):
    """``(fsspec filesystem, path inside it)`` for ``url``; ImportError saying what to install."""
    try:
        import fsspec.core
    except ImportError:
        raise ImportError(f"{url}: a log directory given as a URL needs fsspec and the "
                          "backend for it: pip install 'gradlog[remote]'") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as error:  # fsspec names the missing backend (s3fs, gcsfs, ...)
        raise ImportError(f"{url}: {error} (pip install 'gradlog[remote]')") from None
    except ValueError as error:  # "Protocol not known"
        if "Protocol not known" not in str(error):
            raise ValueError(f"{url}: {error}") from None
        raise UnknownProtocol(f"unknown URL scheme '{_protocol(url)}://'; the "
                              f"installed fsspec protocols are: {', '.join(_installed())}"
                              ) from None


class UnknownProtocol(ImportError):
    """A URL whose scheme no installed fsspec backend (nor fsspec's list of known ones)
    handles: as for a backend that is not installed, there is nothing to reach it with."""


def _installed() -> list[str]:
    """The protocols whose fsspec implementation imports here (its backend is installed)."""
    import importlib

    from fsspec.registry import known_implementations, registry
    found = set(registry)
    for protocol, spec in known_implementations.items():
        try:
            importlib.import_module(spec["class"].rsplit(".", 1)[0])
        except Exception:  # noqa: BLE001, S112 - a missing or broken backend: not installed
            continue
        found.add(protocol)
    return sorted(found)


def process_local(location: str) -> bool:
    """Whether ``location`` is held by this process alone (``memory://``): gone when it
    exits."""
    return _protocol(os.fspath(location)) in PROCESS_LOCAL_PROTOCOLS


def appendable(url: str) -> bool:
    """Whether files at ``url`` can be appended to (else it is an object store)."""
    return _protocol(url) in APPENDABLE_PROTOCOLS


class UploadError(OSError):
    """An upload that still failed after every retry; ``filename`` is the URL."""


def with_retries(action: Callable[[], object], url: str, what: str = "upload",
                 delays: tuple[float, ...] = RETRY_DELAYS):
    """``action()``, tried again after each of ``delays`` while it fails with an error that
    may pass (a timeout, a refused connection, a server error). Raises :class:`UploadError`
    naming ``url`` once the tries are used up; a permanent error (no such bucket, access
    denied) is raised at once, as itself."""
    start = time.monotonic()
    for attempt in range(len(delays) + 1):
        try:
            return action()
        except _PERMANENT:
            raise
        except Exception as error:  # noqa: BLE001 - backends raise their own types
            last = error
            if attempt < len(delays):
                time.sleep(delays[attempt])
    seconds = time.monotonic() - start
    raise UploadError(0, f"{what} failed {len(delays) + 1} times over {seconds:.0f} s "
                      f"({type(last).__name__}: {_one_line(last)})", url) from last


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


# -- files and directories at a URL --------------------------------------------------------

@contextlib.contextmanager
def _named(url: str) -> Iterator[None]:
    """A backend's own error (a refused connection, a timeout) as an ``OSError`` naming
    ``url``, so callers handle one kind of error for every place."""
    try:
        yield
    except (OSError, *_PERMANENT):
        raise
    except Exception as error:  # noqa: BLE001 - backends raise their own types
        raise OSError(0, f"{type(error).__name__}: {_one_line(error)}", url) from error


def read_bytes(url: str) -> bytes:
    fs, path = filesystem(url)
    with _named(url):
        return fs.cat_file(path)


def publish_bytes(url: str, data: bytes) -> None:
    """Write ``data`` to ``url`` so that the name shows only the complete file: uploaded under
    a temporary name (without ``tfevents``), then moved to ``url``; retried when it fails."""
    fs, path = filesystem(url)
    directory, name = posixpath.split(path)
    temporary = posixpath.join(directory, f".{name}.{os.getpid()}.{time.time_ns()}.tmp")
    with_retries(lambda: fs.pipe_file(temporary, data), url)
    with_retries(lambda: fs.mv(temporary, path), url)


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    with _named(url):
        return fs.exists(path)


def isdir(url: str) -> bool:
    fs, path = filesystem(url)
    with _named(url):
        return fs.isdir(path)


def names(url: str) -> list[str]:
    """The names of the files directly in the directory ``url`` (sorted; [] if it is none)."""
    fs, path = filesystem(url)
    try:
        with _named(url):
            entries = fs.ls(path, detail=True, refresh=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = [posixpath.basename(e["name"].rstrip("/")) for e in entries if e["type"] == "file"]
    return sorted(found)


def remove(url: str) -> None:
    fs, path = filesystem(url)
    with _named(url):
        fs.rm_file(path)


def download_event_files(url: str, target: str) -> int:
    """Copy every event file under ``url`` to the same place below the local ``target``;
    returns how many."""
    fs, root = filesystem(url)
    root = root.rstrip("/")
    count = 0
    with _named(url):
        for path in sorted(fs.find(root)):
            if "tfevents" not in posixpath.basename(path):
                continue
            local = os.path.join(target, *path[len(root):].lstrip("/").split("/"))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            fs.get_file(path, local)
            count += 1
    return count


# -- the spool -----------------------------------------------------------------------------

def spool_dir(url: str) -> str:
    """Where segments for ``url`` wait to be uploaded: ``$XDG_CACHE_HOME`` (default
    ``~/.cache``) ``/gradlog/spool/<protocol>/<the URL's path>``."""
    return cache_path("spool", url)


def cache_path(kind: str, url: str) -> str:
    """``$XDG_CACHE_HOME`` (default ``~/.cache``) ``/gradlog/<kind>/<protocol>/<the URL's
    path>``: what gradlog keeps on this machine for ``url``."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, *_cache_parts(kind, url))


def _cache_parts(kind: str, url: str) -> list[str]:
    protocol = _protocol(url) or "file"
    parts = [p for p in url[len(protocol) + 3:].split("/") if p not in ("", ".", "..")]
    return ["gradlog", kind, protocol, *parts]


class NotASpool(ValueError):
    """``gradlog sync`` was given a directory that is not the spool of its URL."""


def check_spool(spool: str, url: str) -> None:
    """Raise :class:`NotASpool` unless ``spool`` is where the segments of ``url`` wait (its
    path ends with ``gradlog/spool/<protocol>/<the URL's path>``, under any cache directory)
    and holds nothing but event files: uploading a spool removes it, so anything else, a run
    directory above all, is refused before it is touched."""
    tail = _cache_parts("spool", url)
    if os.path.realpath(spool).split(os.sep)[-len(tail):] != tail:
        raise NotASpool(f"{spool} is not the spool of {url} (that is {spool_dir(url)}, or "
                        f"another cache directory's {os.path.join(*tail)}): gradlog sync "
                        "removes what it uploads, so it takes only a spool; nothing was touched")
    for root, _dirs, files in os.walk(spool):
        strays = sorted(name for name in files if "tfevents" not in name)
        if strays:
            raise NotASpool(f"{spool} is not a spool: it holds "
                            f"{os.path.join(root, strays[0])}, which is not an event file; "
                            "nothing was touched")


def upload_spool(spool: str, url: str) -> list[str]:
    """Upload every file below ``spool`` to the same place below ``url`` (event files in name
    order, so a live TensorBoard reads them in order), each whole, and remove it from the
    spool once uploaded. Returns the URLs uploaded; an upload that fails raises
    :class:`UploadError` and leaves it (and the rest) in the spool. A directory that is not
    the spool of ``url`` raises :class:`NotASpool` (:func:`check_spool`) first."""
    fs, _ = filesystem(url)
    check_spool(spool, url)
    pending = []
    for root, dirs, files in os.walk(spool):
        dirs.sort()
        rel = os.path.relpath(root, spool)
        for name in files:
            parts = [] if rel == "." else rel.split(os.sep)
            pending.append((parts, name))
    uploaded = []
    for parts, name in sorted(pending, key=lambda item: (item[0], item[1])):
        source = os.path.join(spool, *parts, name)
        target = join(url, *parts, name)
        _, path = filesystem(target)
        with_retries(functools.partial(fs.put_file, source, path), target)
        os.remove(source)
        uploaded.append(target)
    for root, _dirs, _files in os.walk(spool, topdown=False):
        try:
            os.rmdir(root)
        except OSError:
            pass  # not empty: something new arrived
    return uploaded


# -- event storage -------------------------------------------------------------------------

class AppendableFile:
    """One event file on an fsspec filesystem that can append (``memory://``)."""

    def __init__(self, url: str, new_name: Callable[[], str]) -> None:
        self._fs, directory = filesystem(url)
        self._fs.makedirs(directory, exist_ok=True)
        for _ in range(1000):
            self.path = posixpath.join(directory, new_name())
            if not self._fs.exists(self.path):
                break
        self.url = join(url, posixpath.basename(self.path))
        self._fs.pipe_file(self.path, b"")
        self.size = 0

    upload_due = False  # every flush appends at once

    def close(self) -> None:
        pass

    def append(self, data: bytes) -> None:
        try:
            with self._fs.open(self.path, "ab") as f:
                f.write(data)
        except OSError as error:
            raise type(error)(error.errno, error.strerror or str(error), self.url) from error
        self.size += len(data)

    def positions(self, since_step: int | None = None) -> dict[str, int]:
        return {posixpath.basename(self.path): self.size}


class _OpenSegment:
    __slots__ = ("name", "fd", "size", "opened")

    def __init__(self, name: str, fd: int) -> None:
        self.name, self.fd, self.size, self.opened = name, fd, 0, time.monotonic()


class Segments:
    """A writer's event files on an object store: a sequence of immutable segment objects.

    Args:
        url: the run directory.
        new_name: returns the next event file name (they sort in the order they are made).
        header: ``header(step)`` -> the framed first record of a segment after the first.
        max_age: close a segment this many seconds after it was opened.
        max_bytes: close a segment once it holds this many bytes.
        spool: where the open segment and unsent ones wait (default :func:`spool_dir`).

    The writer calls :meth:`append`, :meth:`close_segment` and :meth:`close` with its lock
    held, and :meth:`upload_ready` without it, so the training thread never waits for the
    network behind its writer's lock.
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
        self._open: _OpenSegment | None = None
        self._first = True
        self._ready: collections.deque[tuple[str, int]] = collections.deque()
        self._published: list[tuple[str, int, int]] = []  # (name, size, largest step)
        self._upload_lock = threading.Lock()
        self.error: UploadError | None = None  # set once uploading has failed for good
        self.upload_submitted = False  # an upload_ready() job waits on a background worker
        self.last_name: str | None = None

    @property
    def path(self) -> str:
        """The URL of the open segment (or of the last one)."""
        return join(self.url, self.last_name or "")

    def append(self, data: bytes) -> None:
        """Add framed records to the open segment (opening one first if there is none)."""
        segment = self._open
        if segment is None:
            segment = self._open = self._start()
        _write_all(segment.fd, data, os.path.join(self.spool, segment.name))
        segment.size += len(data)
        if segment.size >= self.max_bytes:
            self.close_segment()

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
        if not self._first:  # the writer queued the first segment's header itself
            _write_all(fd, self._header(), os.path.join(self.spool, name))
            segment.size = os.fstat(fd).st_size
        self._first = False
        return segment

    def due(self) -> float | None:
        """When (``time.monotonic()``) the open segment must be closed; None if none is open.
        Segments waiting for upload are due at once."""
        if self._ready and self.error is None and not self.upload_submitted:
            return 0.0
        return None if self._open is None else self._open.opened + self.max_age

    def close_segment(self) -> None:
        """Close the open segment; it waits in the spool for :meth:`upload_ready`."""
        segment, self._open = self._open, None
        if segment is not None:
            os.close(segment.fd)
            self._ready.append((segment.name, segment.size))

    def close(self) -> None:
        self.close_segment()

    def remove_empty_spool(self) -> None:
        """Once everything is uploaded, the spool directory goes too (when empty)."""
        try:
            os.rmdir(self.spool)
        except OSError:
            pass  # segments wait there, or another writer's

    @property
    def upload_due(self) -> bool:
        """Closed segments wait for :meth:`upload_ready` (and uploading has not failed)."""
        return bool(self._ready) and self.error is None and not self.upload_submitted

    def upload_ready(self) -> None:
        """Upload the closed segments, oldest first, each whole; raises the
        :class:`UploadError` once an upload failed for good (they all stay in the spool)."""
        with self._upload_lock:
            self.upload_submitted = False
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

    def positions(self, since_step: int | None = None) -> dict[str, int]:
        """``{segment name: bytes}`` of the segments uploaded so far that hold events at steps
        ``>= since_step`` (all of them when None)."""
        return {name: size for name, size, largest in self._published
                if since_step is None or largest >= since_step}


def _spooled(error: OSError, url: str, spool: str) -> UploadError:
    reason = error.strerror or str(error)
    return UploadError(error.errno or 0, f"{reason}; {unsent(spool, url)}", url)


def unsent(spool: str, url: str) -> str:
    """What to say of events waiting in ``spool``: where they are, how to upload them."""
    return f"the unsent events are kept in {spool} (upload them with: gradlog sync {spool} {url})"


def spool_holds_files(url: str) -> bool:
    """Whether the spool of ``url`` holds anything (events a failed upload left)."""
    return any(files for _root, _dirs, files in os.walk(spool_dir(url)))


def _write_all(fd: int, data: bytes, path: str) -> None:
    written = 0
    try:
        while written < len(data):
            written += os.write(fd, memoryview(data)[written:])
    except OSError as error:
        raise type(error)(error.errno, error.strerror or str(error), path) from error


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
