"""Run directories of ``gradlog train`` on disk: their default name, ``run.toml`` and the
``checkpoint-<step>.npz`` files.

A checkpoint is one ``.npz`` written atomically by ``gl.save`` (no pickle), named by step so
the newest is easy to find; the newest two are kept. What a checkpoint holds, and how resuming
chooses one, is :mod:`gradlog.train.checkpoints`.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
from typing import Any

from .serialization import atomic_file, load, save

__all__ = ["default_run_dir", "has_events", "checkpoints", "newest_checkpoint",
           "save_checkpoint", "load_checkpoint", "write_run_toml", "CHECKPOINT_FORMAT",
           "CHECKPOINT_VERSION", "RUN_TOML"]

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


def has_events(run_dir: str) -> bool:
    if not os.path.isdir(run_dir):
        return False
    return any("tfevents" in name for name in os.listdir(run_dir))


def checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """``(step, path)`` of every checkpoint in ``run_dir``, oldest first."""
    if not os.path.isdir(run_dir):
        return []
    found = []
    for name in os.listdir(run_dir):
        m = _NAME.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(run_dir, name)))
    return sorted(found)


def newest_checkpoint(run_dir: str) -> str | None:
    found = checkpoints(run_dir)
    return found[-1][1] if found else None


def save_checkpoint(run_dir: str, state: dict[str, Any]) -> str:
    """Write ``state`` as ``checkpoint-<step>.npz`` (atomically). Then remove what is no longer
    the run's: checkpoints of later steps (a timeline abandoned by resuming from an earlier
    one), all but the newest two, and the temporary files of writes a kill interrupted."""
    step = int(state["step"])
    path = os.path.join(run_dir, f"checkpoint-{step:08d}.npz")
    save({"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, **state}, path)
    found = checkpoints(run_dir)
    later = [p for s, p in found if s > step]
    older = [p for s, p in found if s <= step][:-KEEP]
    stale = [os.path.join(run_dir, n) for n in os.listdir(run_dir) if _TEMPORARY.match(n)]
    for old in later + older + stale:
        try:
            os.remove(old)
        except OSError:
            pass
    return path


def load_checkpoint(path: str) -> dict[str, Any]:
    """A run checkpoint; ``ValueError`` (``CheckpointError``) naming the file otherwise."""
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
    path = os.path.join(run_dir, RUN_TOML)
    with atomic_file(path) as f:
        f.write(text.encode("utf-8"))
    return path
