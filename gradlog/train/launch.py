"""``gradlog train --nproc N``: the command is checked as ``gradlog train`` would check it
(user errors are reported once, before any rank starts); then the run's engine starts N ranks
of the same command on this machine (``Engine.run_ranks``: a gradlog model over MPI, a
PyTorch model under torch's launcher, :mod:`gradlog.engines.launchers`), this process waits
for them and names the rank that failed. A failing or killed rank ends every rank, and this
process exits 1 naming it. SIGINT/SIGTERM are passed on to the ranks, which stop together at
the end of a batch after rank 0 saved a checkpoint.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile

from . import runs
from .config import TrainOptions
from .console import Console
from .errors import UserError
from .parallel import STATUS_DIR_ENV
from .preparation import Prepared

__all__ = ["launch", "rank_args", "verdict"]


def launch(options: TrainOptions, prepared: Prepared, console: Console) -> int:
    """Train ``prepared`` (checked, built, nothing written) on ``options.nproc`` processes;
    returns the job's exit status. Raises ``UserError`` before any rank starts."""
    n = options.nproc
    batch_size = prepared.config.settings["batch_size"]
    if int(batch_size) % n:
        raise UserError(f"--batch-size {batch_size} is the global batch: it must divide "
                        f"evenly across the {n} processes (--nproc {n})")
    args = rank_args(options, prepared.run_dir)
    try:
        prepared.engine.check_launcher()
    except ImportError as exc:  # (what to install)
        raise UserError(str(exc)) from None
    claimed = not (options.logdir or options.resume)
    if claimed:  # the ranks get --logdir: take the default directory (or the next free) here
        run_dir = runs.claim_new_dir(prepared.run_dir)
        args = rank_args(options, run_dir)
    status_dir = tempfile.mkdtemp(prefix="gradlog-ranks-")
    env = {STATUS_DIR_ENV: status_dir, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    try:
        exits = prepared.engine.run_ranks(n, _rank_command(args), env, console.err,
                                          console.notice)
        status, message = verdict(n, _statuses(status_dir, n), exits)
    finally:
        shutil.rmtree(status_dir, ignore_errors=True)
        if claimed and not os.listdir(run_dir):  # the ranks wrote nothing: leave nothing
            os.rmdir(run_dir)
    if message:
        (console.error if status == 1 else console.notice)(f"gradlog train: {message}")
    return status


def rank_args(options: TrainOptions, run_dir: str) -> list[str]:
    """The ``gradlog train`` arguments each rank runs with: the same command, its run
    directory named (a default one holds the launcher's time), without ``--nproc``."""
    if options.extra:
        raise UserError(f"--nproc: settings given from Python ({', '.join(options.extra)}) "
                        "cannot be passed to the ranks; put them in the [train] table of a "
                        "--config file")
    if any(not isinstance(p, str) for p in options.plugins):
        raise UserError("--nproc: plugins given as Python objects cannot be passed to the "
                        "ranks; give them as NAME:key=value strings")
    args = ["train"] + ([options.example] if options.example else [])
    if options.resume:
        args += ["--resume", options.resume]
    else:
        args += ["--logdir", run_dir]
    for flag, value in (("--epochs", options.epochs), ("--batch-size", options.batch_size),
                        ("--lr", options.lr), ("--seed", options.seed),
                        ("--config", options.config_file)):
        if value is not None:
            args += [flag, repr(value) if isinstance(value, float) else str(value)]
    for spec in options.plugins:
        args += ["-p", spec]
    if options.default_plugins is False:
        args.append("--no-default-plugins")
    if options.strict_plugins:
        args.append("--strict-plugins")
    if options.quiet:
        args.append("--quiet")
    return args


def _rank_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "gradlog.cli", *args]


# -- the verdict -------------------------------------------------------------------------------
def _statuses(status_dir: str, n: int) -> dict[int, tuple[int, str]]:
    import json
    out = {}
    for rank in range(n):
        path = os.path.join(status_dir, f"rank{rank}.json")
        if os.path.isfile(path):
            with open(path) as f:
                record = json.load(f)
            out[rank] = (int(record["status"]), str(record.get("message", "")))
    return out


def verdict(n: int, reported: dict[int, tuple[int, str]],
            ended: dict[int, str]) -> tuple[int, str]:
    """The job's exit status and what to say: a rank killed (or ended) without reporting is
    the cause (those killed by a signal, if any: a peer that then lost its connection is
    not); else the ranks that reported a failure; else the status they all share."""
    silent = {r: how for r, how in ended.items() if r not in reported}
    silent = {r: how for r, how in silent.items() if how.startswith("signal")} or silent
    if silent:
        named = "; ".join(f"rank {r} of {n} {_how(how)}" for r, how in sorted(silent.items()))
        return 1, f"{named}; every rank was stopped"
    failed = {r: sm for r, sm in reported.items() if sm[0] != 0}
    if not failed:
        if len(reported) < n:
            return 1, f"only {len(reported)} of {n} ranks finished; the others were stopped"
        return 0, ""
    worst = min(failed.values(), key=lambda sm: {1: 0, 2: 1}.get(sm[0], 2))[0]
    ranks = sorted(r for r, sm in failed.items() if sm[0] == worst)
    if worst in (130, 143):
        return worst, f"interrupted ({signal.Signals(worst - 128).name}); every rank stopped"
    if worst != 1:
        return worst, ""  # a user error: the ranks said it themselves
    return 1, f"rank {ranks[0]} of {n} failed: {failed[ranks[0]][1]}; every rank was stopped"


def _how(ended: str) -> str:
    kind, _, what = ended.partition(" ")
    return f"was killed by {what}" if kind == "signal" else f"exited with status {what}"
