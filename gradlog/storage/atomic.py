"""Durable local files: the one place that writes a file whole (temporary file, fsync, rename,
directory fsync) and that fsyncs files and directories."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import IO

__all__ = ["atomic_file", "fsync_directory", "fsync_file", "with_path"]


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[IO[bytes]]:
    """A binary file that replaces ``path`` only once the block ends without error: written
    to a temporary file beside it, fsynced, renamed over ``path``, the directory fsynced. A
    crash at any point leaves the old file or the new one, never a half-written one."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = _create_temporary(directory, f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.replace(tmp, path)
        except OSError as error:  # e.g. a directory in the way: name it, not the temporary
            raise type(error)(error.errno, error.strerror, path) from error
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_directory(directory)


def _create_temporary(directory: str, prefix: str) -> tuple[int, str]:
    """A new file ``<prefix><random>.tmp`` created with mode 0o666 less the umask, as
    ``open(path, "wb")`` (and ``torch.save``) create files; ``mkstemp`` would make it 0o600."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
             | getattr(os, "O_BINARY", 0))
    for _ in range(100):
        tmp = os.path.join(directory, f"{prefix}{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name for {prefix!r} in {directory}")


def fsync_directory(directory: str) -> None:
    """Make the names in ``directory`` durable, e.g. after a rename (POSIX; directories cannot
    be opened for fsync on Windows)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str) -> None:
    """Make the contents of the closed file ``path`` durable."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def with_path(error: OSError, path: str) -> OSError:
    """The same kind of ``OSError``, naming ``path`` (``os.write`` errors name no file)."""
    if error.filename is not None:
        return error
    return type(error)(error.errno, error.strerror or str(error), path)
