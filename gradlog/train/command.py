"""``gradlog train`` from its options to its exit status: it chooses how to train (``--nproc N``
starts N ranks, :mod:`.launch`; otherwise this process trains, alone or as one rank of a job,
:mod:`.trainer`), and it alone turns how the command ended into the exit status.

Exit statuses: 0 done (also after ``StopTraining``, and for a run already finished); 1 the run
failed (a mutator's or strict plugin's failure, ``PluginAbort``, a write error, an enabled
plugin that fails to import); 2 a user error; 130 after SIGINT and 143 after SIGTERM.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import TextIO

from ..plugin import PluginConfigError, PluginLoadError
from . import parallel
from .config import TrainOptions
from .console import Console
from .errors import AlreadyFinished, Interrupted, RunFailed, UserError
from .launch import launch
from .preparation import prepare
from .signals import SignalOwner
from .trainer import Trainer

__all__ = ["train", "exit_status"]


def train(options: TrainOptions, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``gradlog train``; returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    console = Console(out, err, options.quiet)
    if options.nproc > 1:
        return exit_status(lambda: _launch(options, console), console)
    try:
        job = parallel.join()
    except UserError as exc:  # (said without the rank it could not learn)
        return exit_status(functools.partial(_raise, exc), Console(out, err))
    if job is None:
        return _train_here(options, console, None)
    if job.rank != 0:  # the other ranks say only what goes wrong, prefixed with their rank
        with open(os.devnull, "w") as silent:
            console = Console(silent, err, True, prefix=f"rank {job.rank}: ")
            status = _train_here(options, console, job)
    else:
        status = _train_here(options, console, job)
    job.finish(status, console.last_error)
    return status


def exit_status(action: Callable[[], int | None], console: Console) -> int:
    """The exit status of ``action()``: what it returns (None: 0), or what it raised, said on
    ``console``."""
    try:
        return action() or 0
    except AlreadyFinished as done:
        console.result(str(done))
        return AlreadyFinished.exit_code
    except (UserError, PluginConfigError) as exc:
        console.error(str(exc), getattr(exc, "detail", ""))
        return UserError.exit_code
    except PluginLoadError as exc:
        console.error(str(exc))
        return RunFailed.exit_code
    except RunFailed as exc:
        console.error(str(exc), exc.detail)
        return RunFailed.exit_code
    except Interrupted as exc:
        console.notice(exc.report or f"{exc}: interrupted while starting; nothing was trained")
        return exc.exit_status


def _raise(exc: BaseException) -> None:
    raise exc


def _launch(options: TrainOptions, console: Console) -> int:
    with SignalOwner():
        prepared = prepare(options, console)  # checked, built, nothing written
    return launch(options, prepared, console)


def _train_here(options: TrainOptions, console: Console, job: parallel.Job | None) -> int:
    from ..utils.memory import reuse_freed_memory
    reuse_freed_memory()  # this process trains: keep each step's big temporaries for the next
    with SignalOwner() as signals:
        return exit_status(lambda: _train(options, console, signals, job), console)


def _train(options: TrainOptions, console: Console, signals: SignalOwner,
           job: parallel.Job | None) -> int:
    trainer = Trainer(prepare(options, console, job), console, signals, job)
    try:
        trainer.open()
        if job is not None:
            job.collectives.barrier()  # rank 0 has checked and created the directory
        status = exit_status(trainer.execute, console)
        trainer.warn_disabled()  # after the run's own last words
        return status
    finally:
        trainer.release()
