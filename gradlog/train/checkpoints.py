"""Checkpoints of ``gradlog train``, and what ``--resume DIR`` continues from.

A checkpoint holds everything needed to continue the run exactly: its configuration (the
record ``run.toml`` also holds), the model, optimizer, scheduler, the training loader's
position, the Run's and plugins' states, the global random state, and how far each event file
was on disk (``SummaryWriter.sync()``, which fsyncs them first: a checkpoint never claims
events a power loss could take back). The resumed writer replays the events at the
checkpoint's step that preceded it and hides everything after (see
:mod:`gradlog.tensorboard.replay`).

Choosing what to resume: the newest checkpoint that loads; a damaged one is reported (once,
naming the entry) and the one before it is used. No checkpoint yet, but a ``run.toml``: the
run died before its first checkpoint and starts over. Neither: the directory holds no run.

A run directory at a URL: checkpoints are uploaded whole and appear by name only once complete
(:mod:`gradlog.train.runs`); a resumed run first uploads what its spool holds
(:func:`upload_spool`): the segment an earlier session was writing when it was killed, and
those it could not upload.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from typing import Any

from ..tensorboard import storage
from . import runs
from .built import Built
from .config import RunConfig
from .errors import UserError

__all__ = ["ResumePoint", "find_resume_point", "capture", "restore", "save", "upload_spool"]


@dataclass
class ResumePoint:
    """What ``--resume`` continues: the recorded configuration and, unless the run died
    before its first checkpoint, the checkpoint's state."""

    config: RunConfig
    state: dict | None = None
    path: str | None = None
    notes: list[str] = field(default_factory=list)  # damaged checkpoints passed over

    @property
    def step(self) -> int:
        return int(self.state["step"]) if self.state is not None else 0

    @property
    def epoch(self) -> int:
        return int(self.state["epoch"]) if self.state is not None else 0


def find_resume_point(run_dir: str) -> ResumePoint:
    """The newest intact checkpoint of ``run_dir``, or its ``run.toml``; UserError when the
    directory does not exist, holds no run, or holds only damaged checkpoints."""
    try:
        if not runs.exists(run_dir):
            raise UserError(f"cannot resume {run_dir}: no such directory")
        if not runs.isdir(run_dir):
            raise UserError(f"cannot resume {run_dir}: not a directory")
        found = runs.checkpoints(run_dir)
        has_toml = runs.has_file(run_dir, runs.RUN_TOML)
    except (OSError, ImportError) as exc:  # a URL: no backend, no bucket, no network
        raise UserError(f"cannot resume {run_dir}: {exc}") from None
    toml_path = storage.join(run_dir, runs.RUN_TOML)
    if not found and not has_toml:
        raise UserError(f"cannot resume {run_dir}: it holds no gradlog run (no {runs.RUN_TOML}, "
                        "no checkpoint-*.npz); give the run directory gradlog train printed")
    notes: list[str] = []
    for _, path in reversed(found):
        try:
            state = runs.load_checkpoint(path)
            config = RunConfig.from_record(state.get("config"), path)
        except (ValueError, OSError) as exc:  # CheckpointError is a ValueError
            notes.append(str(exc))
            continue
        return ResumePoint(config, state, path, notes)
    if found:
        raise UserError(f"cannot resume {run_dir}: no checkpoint is intact ({'; '.join(notes)})")
    try:
        record = tomllib.loads(runs.read_text(toml_path))
        return ResumePoint(RunConfig.from_record(record, toml_path))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError) as exc:
        raise UserError(f"cannot resume {run_dir}: {toml_path} is damaged ({exc})") from None


def capture(run: Any, built: Built, config: RunConfig, writer: Any) -> dict[str, Any]:
    """The state of the run at its current (completed) step, its event files synced; the
    run's engine turns its tensors into what ``gl.save`` stores (the same ``.npz`` for a
    PyTorch model, no pickle)."""
    run_state = run.state_dict()  # first: it ends a batch whose optimizer step is done
    scheduler = built.scheduler
    loader = built.train_loader
    position = loader.state_dict()
    if position["batch"]:  # mid-epoch: a batch served whose step was not done (a plugin
        # stopped the run before it) is the resumed run's first: a step is a batch
        position["batch"] = min(position["batch"], run.step - run.epoch * len(loader))
    state = {"step": run.step, "epoch": run.epoch, "config": config.to_record(),
             "model": built.model.state_dict(), "optimizer": built.optimizer.state_dict(),
             "scheduler": scheduler.state_dict() if scheduler is not None else None,
             "train_loader": position, "run": run_state,
             "rng": run.engine.random_state()}
    return {**run.engine.to_checkpoint(state), "events": writer.sync(since_step=run.step)}


def restore(state: dict[str, Any], run: Any, built: Built) -> None:
    """Put the model, optimizer, scheduler, loader, run and random state back as saved (as
    the run's engine's tensors)."""
    engine = run.engine
    state = engine.from_checkpoint(state)
    built.model.load_state_dict(state["model"])
    built.optimizer.load_state_dict(state["optimizer"])
    if built.scheduler is not None and state.get("scheduler") is not None:
        built.scheduler.load_state_dict(state["scheduler"])
    built.train_loader.load_state_dict(state["train_loader"])
    run.load_state_dict(state["run"])
    engine.set_random_state(state["rng"])


def save(run_dir: str, state: dict[str, Any]) -> str:
    return runs.save_checkpoint(run_dir, state)


def upload_spool(run_dir: str) -> list[str]:
    """Upload the event files an earlier session of the run at URL ``run_dir`` left in its
    local spool; returns their URLs ([] for a local run directory or an empty spool)."""
    if not storage.is_url(run_dir):
        return []
    spool = storage.spool_dir(run_dir)
    return storage.upload_spool(spool, run_dir) if os.path.isdir(spool) else []
