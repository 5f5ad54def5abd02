"""Run directories of ``gradlog train`` on disk: their default name, ``run.toml`` and the
``checkpoint-<step>.npz`` files.

A checkpoint is one ``.npz`` written atomically by ``gl.save`` (no pickle), named by step so
the newest is easy to find; the newest two are kept. What a checkpoint holds, and how resuming
chooses one, is :mod:`gradlog.train.checkpoints`.

A run directory may be any fsspec URL: files are read and written through :mod:`gradlog.storage`,
which publishes a checkpoint and ``run.toml`` whole (locally fsynced and renamed, at a URL
uploaded to a temporary name and moved to theirs), so a name only ever shows a complete file.
"""

from __future__ import annotations

import datetime
import io
import os
import re
import socket
from typing import Any

from . import storage
from .serialization import load, save
from .storage import exists, has_file, isdir, makedirs, names, remove

__all__ = ["default_run_dir", "claim_new_dir", "has_events", "holds_run", "checkpoints",
           "newest_checkpoint",
           "save_checkpoint", "load_checkpoint", "write_run_toml", "CHECKPOINT_FORMAT",
           "CHECKPOINT_VERSION", "RUN_TOML", "names", "exists", "isdir", "has_file",
           "read_text", "remove", "makedirs"]

CHECKPOINT_FORMAT = "gradlog-run-checkpoint"
CHECKPOINT_VERSION = 2  # 2: the run's configuration and its event files' positions inside
RUN_TOML = "run.toml"
_NAME = re.compile(r"^checkpoint-(\d{8})\.npz$")
_TEMPORARY = re.compile(r"^\.checkpoint-\d{8}\.npz\..*\.tmp$")  # gl.save's, left by a kill
KEEP = 2


def default_run_dir(root: str = "runs") -> str:
    """PyTorch's default: ``runs/<Mon DD_HH-MM-SS>_<hostname>``."""
    stamp = datetime.datetime.now().strftime("%b%d_%H-%M-%S")
    return os.path.join(root, f"{stamp}_{socket.gethostname()}")


def claim_new_dir(path: str) -> str:
    """Create the local directory ``path``, or ``path-1``, ``path-2``, ... if it exists, and
    return the one created: runs started in the same second (a sweep launched from a loop)
    each get a default directory of their own, taken atomically."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    for n in range(10_000):
        candidate = path if n == 0 else f"{path}-{n}"
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"no free run directory next to {path}")  # pragma: no cover


def read_text(path: str) -> str:
    return storage.read_bytes(path).decode("utf-8")


# -- events, checkpoints, run.toml ----------------------------------------------------------

def has_events(run_dir: str) -> bool:
    return any("tfevents" in name for name in names(run_dir))


def holds_run(run_dir: str) -> bool:
    """Whether ``run_dir`` already holds a run (event files, or ``gradlog train``'s
    ``run.toml``): a new run there would log its steps again after the old ones'."""
    return has_events(run_dir) or has_file(run_dir, RUN_TOML)


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
    storage.publish(path, lambda f: save(record, f))
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
    storage.publish(path, text.encode("utf-8"))
    return path
