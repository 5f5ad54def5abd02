"""Run directories shared by ``gl.watch`` and ``gradlog train``: the default name of a new
run (PyTorch's), claiming one atomically, and whether a directory already holds a run (a new
run there would log its steps again after the old ones'). ``gradlog train``'s own files in a
run directory (checkpoints, ``run.toml``) are :mod:`gradlog.train.runs`, above this.

A run directory may be a path or any fsspec URL (:mod:`gradlog.tensorboard.storage`).
"""

from __future__ import annotations

import datetime
import os
import socket

from ..tensorboard import storage

__all__ = ["default_run_dir", "claim_new_dir", "names", "has_file", "has_events", "holds_run",
           "RUN_TOML"]

RUN_TOML = "run.toml"  # gradlog train's record of a run's configuration


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


def names(run_dir: str) -> list[str]:
    """The names of the files (locally: and directories) in ``run_dir``; [] if it is none."""
    if storage.is_url(run_dir):
        return storage.names(run_dir)
    path = storage.local_path(run_dir)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def has_file(run_dir: str, name: str) -> bool:
    if storage.is_url(run_dir):
        return name in storage.names(run_dir)
    return os.path.isfile(os.path.join(storage.local_path(run_dir), name))


def has_events(run_dir: str) -> bool:
    return any("tfevents" in name for name in names(run_dir))


def holds_run(run_dir: str) -> bool:
    """Whether ``run_dir`` already holds a run (event files, or ``gradlog train``'s
    ``run.toml``): a new run there would log its steps again after the old ones'."""
    return has_events(run_dir) or has_file(run_dir, RUN_TOML)
