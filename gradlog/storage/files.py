"""Whole files at a location, local or at a URL, with one set of functions: what run
directories, checkpoints, ``run.toml`` and the projector's files need. A file is always
published whole: locally through :func:`.atomic.atomic_file`, at a URL uploaded under a
temporary name (without ``tfevents``) and moved to its own, so a name only ever shows a
complete file."""

from __future__ import annotations

import io
import os
import posixpath
import time
from collections.abc import Callable
from typing import IO

from .atomic import atomic_file
from .locations import filesystem, is_url, local_path
from .retries import named, with_retries

__all__ = ["read_bytes", "publish", "exists", "isdir", "names", "remove", "makedirs",
           "has_file", "download_event_files"]


def read_bytes(location: str) -> bytes:
    if is_url(location):
        fs, path = filesystem(location)
        with named(location):
            return fs.cat_file(path)
    with open(local_path(location), "rb") as f:
        return f.read()


def publish(location: str, data: bytes | Callable[[IO[bytes]], object]) -> None:
    """Write a whole file at ``location``: ``data`` is bytes, or a function writing to a binary
    file. A crash leaves the old file or the new one; at a URL the upload is retried."""
    if not is_url(location):
        with atomic_file(local_path(location)) as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
        return
    if callable(data):
        buffer = io.BytesIO()
        data(buffer)
        data = buffer.getvalue()
    fs, path = filesystem(location)
    directory, name = posixpath.split(path)
    temporary = posixpath.join(directory, f".{name}.{os.getpid()}.{time.time_ns()}.tmp")
    with_retries(lambda: fs.pipe_file(temporary, data), location)
    with_retries(lambda: fs.mv(temporary, path), location)


def exists(location: str) -> bool:
    if not is_url(location):
        return os.path.exists(local_path(location))
    fs, path = filesystem(location)
    with named(location):
        return fs.exists(path)


def isdir(location: str) -> bool:
    if not is_url(location):
        return os.path.isdir(local_path(location))
    fs, path = filesystem(location)
    with named(location):
        return fs.isdir(path)


def names(location: str) -> list[str]:
    """The names in the directory ``location``, sorted ([] if it is none): at a URL its files,
    locally its files and directories."""
    if not is_url(location):
        path = local_path(location)
        return sorted(os.listdir(path)) if os.path.isdir(path) else []
    fs, path = filesystem(location)
    try:
        with named(location):
            entries = fs.ls(path, detail=True, refresh=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = [posixpath.basename(e["name"].rstrip("/")) for e in entries if e["type"] == "file"]
    return sorted(found)


def has_file(directory: str, name: str) -> bool:
    if is_url(directory):
        return name in names(directory)
    return os.path.isfile(os.path.join(local_path(directory), name))


def remove(location: str) -> None:
    if not is_url(location):
        os.remove(local_path(location))
        return
    fs, path = filesystem(location)
    with named(location):
        fs.rm_file(path)


def makedirs(location: str) -> None:
    """Create the directory ``location`` (an object store needs no directories)."""
    if not is_url(location):
        os.makedirs(local_path(location), exist_ok=True)


def download_event_files(url: str, target: str) -> int:
    """Copy every event file under ``url`` to the same place below the local ``target``;
    returns how many."""
    fs, root = filesystem(url)
    root = root.rstrip("/")
    count = 0
    with named(url):
        for path in sorted(fs.find(root)):
            if "tfevents" not in posixpath.basename(path):
                continue
            local = os.path.join(target, *path[len(root):].lstrip("/").split("/"))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            fs.get_file(path, local)
            count += 1
    return count
