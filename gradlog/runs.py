"""Run directories and run checkpoints for ``gradlog train``.

A checkpoint holds everything needed to continue a run exactly: model, optimizer, scheduler,
plugin states, the loader's position and all random states. It is one ``.npz`` written
atomically by ``gl.save`` (no pickle), named by step so the newest is easy to find.
"""

from __future__ import annotations

import datetime
import os
import re
import socket
from typing import Any

from .serialization import load, save

__all__ = ["default_run_dir", "has_events", "checkpoints", "newest_checkpoint",
           "save_checkpoint", "load_checkpoint", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = "gradlog-run-checkpoint"
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
    """Write ``state`` as ``checkpoint-<step>.npz`` (atomically); keep the newest two, and
    remove temporary files that a process killed while writing a checkpoint left behind."""
    path = os.path.join(run_dir, f"checkpoint-{int(state['step']):08d}.npz")
    save({"format": CHECKPOINT_FORMAT, "version": 1, **state}, path)
    stale = [os.path.join(run_dir, n) for n in os.listdir(run_dir) if _TEMPORARY.match(n)]
    for old in [p for _, p in checkpoints(run_dir)[:-KEEP]] + stale:
        try:
            os.remove(old)
        except OSError:
            pass
    return path


def load_checkpoint(path: str) -> dict[str, Any]:
    state = load(path)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a gradlog run checkpoint")
    return state
