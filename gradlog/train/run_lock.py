"""One ``gradlog train`` per run directory at a time.

Checking that a directory holds no run, then writing one, is a race: two commands started
together both pass the check and both write. So the process that writes a run claims its
directory first and holds the claim for its whole life; a second process is refused, naming the
holder.

* **A local directory**: ``flock`` on ``.gradlog-train.lock`` inside it, which the kernel
  releases when the process ends, however it ends (a SIGKILL included), so a lock is never left
  stale. The file is kept afterwards (removing a lock file races with the next process opening
  it).
* **A URL** (an object store, which has no lock): the object ``.gradlog-train.lock`` inside it,
  created only where none exists, holding ``pid N on HOST`` and a random token. On S3 the create
  is conditional (``If-None-Match: *``): of two processes, on any machines, exactly one creates
  it. Other backends get a check that the object is absent, then the write: two processes
  starting within that moment may both pass. The object is removed when the claim is released.
  A killed process leaves it behind: a later claim from the same host takes over the object of
  a process that is no longer running; otherwise the refusal names the object to delete.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket

from .. import storage
from .errors import UserError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock
    fcntl = None

__all__ = ["RunLock", "LOCK_NAME"]

LOCK_NAME = ".gradlog-train.lock"
_HOLDER = re.compile(r"pid ([0-9]+) on (\S+)$")


class RunLock:
    """Claims ``run_dir`` (which must exist, if local) until :meth:`release` or the end of the
    process; raises a UserError naming the process that holds it."""

    def __init__(self, run_dir: str) -> None:
        self._fd: int | None = None
        self._object: str | None = None  # the lock object, for a URL
        if storage.is_url(run_dir):
            self._object = _create_object(run_dir)
        else:
            self._fd = _lock_file(run_dir)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the file releases its lock
        url, self._object = self._object, None
        if url is not None:
            with contextlib.suppress(OSError):  # unreachable: a later claim takes it over
                storage.remove(url)


def _in_use(run_dir: str, holder: str, remedy: str = "") -> UserError:
    return UserError(f"{run_dir} is in use by another gradlog train ({holder}), which holds it "
                     "until it ends; choose another --logdir, or --resume it once that run has "
                     f"ended{remedy}")


def _lock_file(run_dir: str) -> int | None:
    """The descriptor of ``run_dir``'s lock file, locked (None where there is no flock)."""
    if fcntl is None:
        return None
    path = os.path.join(storage.local_path(run_dir), LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        raise _in_use(run_dir, f"pid {holder}" if holder.isdigit() else "starting") from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


def _create_object(run_dir: str) -> str:
    """Create ``run_dir``'s lock object (taking over a stale one); returns its URL."""
    url = storage.join(run_dir, LOCK_NAME)
    fs, key = storage.filesystem(url)
    mine = f"pid {os.getpid()} on {socket.gethostname()}\n{secrets.token_hex(16)}\n"
    for _ in range(3):
        holder = _holder(url)
        if holder is None:  # for a backend without a conditional create, this check is all
            try:
                storage.with_retries(lambda: fs.pipe_file(key, mine.encode(), mode="create"),
                                     url, "claim")
                return url
            except FileExistsError:
                holder = _holder(url)
            if holder is None:
                continue  # released meanwhile
            if holder == mine:  # a retried create whose first try had gone through
                return url
        first = holder.partition("\n")[0]
        if not _stale(first):
            raise _in_use(run_dir, first or "unknown", f" (if that process is no longer "
                                                      f"running, delete {url})")
        # NOTE: no conditional delete: two processes taking over one stale object at the
        # same moment may both pass (the first's new object removed by the second)
        with contextlib.suppress(FileNotFoundError):
            storage.remove(url)
    raise _in_use(run_dir, "starting")  # pragma: no cover - claimed and released meanwhile


def _holder(url: str) -> str | None:
    """What the lock object at ``url`` holds (None if there is none)."""
    try:
        data = storage.with_retries(lambda: storage.read_bytes(url), url, "read")
    except FileNotFoundError:
        return None
    return data.decode("utf-8", "replace")


def _stale(holder: str) -> bool:
    """Whether ``holder`` (``pid N on HOST``) names a process of this host that has ended."""
    match = _HOLDER.match(holder)
    if match is None or match[2] != socket.gethostname() or int(match[1]) <= 0:
        return False
    try:
        os.kill(int(match[1]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False  # running, as another user; a pid no process can have
    return False
