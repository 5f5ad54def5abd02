"""What ``gradlog train`` keeps in a run directory: ``run.toml`` and the
``checkpoint-<step>.npz`` files; and the file operations on a run directory, local or at a
URL. Naming a new run directory and telling whether one holds a run is shared with
``gl.watch`` (:mod:`gradlog.plugin.run_dirs`, re-exported here for the loop's modules).

A checkpoint is one ``.npz`` written atomically by ``gl.save`` (no pickle), named by step so
the newest is easy to find; the newest two are kept. What a checkpoint holds, and how resuming
chooses one, is :mod:`gradlog.train.checkpoints`.

A run directory may be any fsspec URL (:mod:`gradlog.tensorboard.storage`): a checkpoint and
``run.toml`` are then written whole to a temporary name and moved to theirs, so a name only
ever shows a complete file.
"""

from __future__ import annotations

import io
import os
import re
from typing import Any

from ..plugin.run_dirs import (
    RUN_TOML,
    claim_new_dir,
    default_run_dir,
    has_events,
    has_file,
    holds_run,
    names,
)
from ..serialization import atomic_file, load, save
from ..tensorboard import storage

__all__ = ["default_run_dir", "claim_new_dir", "has_events", "holds_run", "checkpoints",
           "newest_checkpoint",
           "save_checkpoint", "load_checkpoint", "write_run_toml", "CHECKPOINT_FORMAT",
           "CHECKPOINT_VERSION", "RUN_TOML", "names", "exists", "isdir", "has_file",
           "read_text", "remove", "makedirs"]

CHECKPOINT_FORMAT = "gradlog-run-checkpoint"
CHECKPOINT_VERSION = 2  # 2: the run's configuration and its event files' positions inside
_NAME = re.compile(r"^checkpoint-(\d{8})\.npz$")
_TEMPORARY = re.compile(r"^\.checkpoint-\d{8}\.npz\..*\.tmp$")  # gl.save's, left by a kill
KEEP = 2


# -- a run directory, local or at a URL ------------------------------------------------------

def exists(run_dir: str) -> bool:
    if storage.is_url(run_dir):
        return storage.exists(run_dir)
    return os.path.exists(storage.local_path(run_dir))


def isdir(run_dir: str) -> bool:
    if storage.is_url(run_dir):
        return storage.isdir(run_dir)
    return os.path.isdir(storage.local_path(run_dir))


def read_text(path: str) -> str:
    if storage.is_url(path):
        return storage.read_bytes(path).decode("utf-8")
    with open(storage.local_path(path), encoding="utf-8") as f:
        return f.read()


def remove(path: str) -> None:
    if storage.is_url(path):
        storage.remove(path)
    else:
        os.remove(storage.local_path(path))


def makedirs(run_dir: str) -> None:
    """Create ``run_dir`` (an object store needs no directories)."""
    if not storage.is_url(run_dir):
        os.makedirs(storage.local_path(run_dir), exist_ok=True)


def _publish(path: str, data_or_writer) -> None:
    """Write a whole file: ``data_or_writer`` is bytes, or a function writing to a file."""
    if storage.is_url(path):
        if callable(data_or_writer):
            buffer = io.BytesIO()
            data_or_writer(buffer)
            data_or_writer = buffer.getvalue()
        storage.publish_bytes(path, data_or_writer)
        return
    with atomic_file(storage.local_path(path)) as f:
        if callable(data_or_writer):
            data_or_writer(f)
        else:
            f.write(data_or_writer)


# -- events, checkpoints, run.toml ----------------------------------------------------------

def checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """``(step, path)`` of every checkpoint in ``run_dir``, oldest first (a directory of a
    checkpoint's name is none)."""
    found = []
    for name in names(run_dir):
        m = _NAME.match(name)
        path = storage.join(run_dir, name)
        if m and (storage.is_url(path) or not os.path.isdir(storage.local_path(path))):
            found.append((int(m.group(1)), path))
    return sorted(found)


def newest_checkpoint(run_dir: str) -> str | None:
    found = checkpoints(run_dir)
    return found[-1][1] if found else None


def save_checkpoint(run_dir: str, state: dict[str, Any]) -> str:
    """Write ``state`` as ``checkpoint-<step>.npz`` (atomically). Then remove what is no longer
    the run's: checkpoints of later steps (a timeline abandoned by resuming from an earlier
    one), all but the newest two, and the temporary files of writes a kill interrupted."""
    step = int(state["step"])
    path = storage.join(run_dir, f"checkpoint-{step:08d}.npz")
    record = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **state}
    _publish(path, lambda f: save(record, f))
    found = checkpoints(run_dir)
    later = [p for s, p in found if s > step]
    older = [p for s, p in found if s <= step][:-KEEP]
    stale = [storage.join(run_dir, n) for n in names(run_dir) if _TEMPORARY.match(n)]
    for old in later + older + stale:
        try:
            remove(old)
        except OSError:
            pass
    return path


def load_checkpoint(path: str) -> dict[str, Any]:
    """A run checkpoint; ``ValueError`` (``CheckpointError``) naming the file otherwise."""
    if storage.is_url(path):
        source = io.BytesIO(storage.read_bytes(path))
        source.name = path  # named in load's errors
        state = load(source)
    else:
        state = load(path)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a gradlog run checkpoint")
    if state.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path} is a run checkpoint of version {state.get('version')!r}, "
                         f"written by another gradlog (this one resumes version "
                         f"{CHECKPOINT_VERSION})")
    return state


def write_run_toml(run_dir: str, text: str) -> str:
    """Write ``run_dir/run.toml`` atomically."""
    path = storage.join(run_dir, RUN_TOML)
    _publish(path, text.encode("utf-8"))
    return path
