"""One ``gradlog train`` per run directory at a time.

Checking that a directory holds no run, then writing one, is a race: two commands started
together both pass the check and both write. So the process that writes a run holds an
exclusive lock on it for its whole life: ``flock`` on a file, which the kernel releases when
the process ends, however it ends (a SIGKILL included), so a lock is never left stale.

For a local directory the file is ``.gradlog-train.lock`` inside it (kept afterwards: removing
a lock file races with the next process opening it). An object store offers no lock that
outlives a crash safely, so for a URL the file is in the local cache,
``$XDG_CACHE_HOME/gradlog/locks/<protocol>/<the URL's path>.lock``: two commands on one machine
are serialized; two on different machines are not (the check before writing remains).
"""

from __future__ import annotations

import os

from ..tensorboard import storage
from .errors import UserError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock
    fcntl = None

__all__ = ["RunLock", "LOCK_NAME", "lock_path"]

LOCK_NAME = ".gradlog-train.lock"


def lock_path(run_dir: str) -> str:
    """The file whose lock claims ``run_dir``."""
    if not storage.is_url(run_dir):
        return os.path.join(storage.local_path(run_dir), LOCK_NAME)
    return storage.cache_path("locks", run_dir.rstrip("/")) + ".lock"


class RunLock:
    """Claims ``run_dir`` (which must exist, if local) until :meth:`release` or the end of the
    process; raises a UserError naming the process that holds it."""

    def __init__(self, run_dir: str) -> None:
        self._fd: int | None = None
        if fcntl is None:
            return
        path = lock_path(run_dir)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise UserError(
                f"{run_dir} is in use by another gradlog train "
                f"({f'pid {holder}' if holder.isdigit() else 'starting'}), which holds it until "
                "it ends; choose another --logdir, or --resume it once that run has ended"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the file releases its lock
