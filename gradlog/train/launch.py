"""``gradlog train --nproc N``: this process checks the command as ``gradlog train`` would
(user errors are reported once, before any rank starts), then starts N ranks of the same
command on this machine, waits for them, and names the rank that failed.

The launcher depends on the model ``build()`` makes: a gradlog model trains over MPI, started by
the mpich wheel's ``mpiexec`` (its fork-based process manager: local processes, no control
port listening on the network; MPI itself on the loopback device); a PyTorch model over gloo,
started by torch's own launcher (``torch.distributed.launcher``, torchrun's engine) with its
rendezvous on 127.0.0.1. A failing or killed rank ends every rank (MPI aborts the job; torch's
agent stops the others), and this process exits 1 naming it. SIGINT/SIGTERM are passed on to
the ranks, which stop together at the end of a batch after rank 0 saved a checkpoint.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from typing import Any

from . import runs
from .config import TrainOptions
from .console import Console
from .errors import UserError
from .parallel import STATUS_DIR_ENV
from .preparation import Prepared

__all__ = ["launch", "rank_args", "verdict"]

# mpiexec.gforker's line for a rank that did not exit cleanly, e.g. "[0]1:Return code = 0,
# signaled with Killed" (strsignal's words; "Quit": the manager ending the other ranks)
_GFORKER_EXIT = re.compile(r"^\[\d+\](\d+):Return code = (-?\d+)(?:, signaled with (.+))?$")
_SIGNAL_NAMES = {signal.strsignal(s): s.name for s in signal.Signals if signal.strsignal(s)}


def launch(options: TrainOptions, prepared: Prepared, console: Console) -> int:
    """Train ``prepared`` (checked, built, nothing written) on ``options.nproc`` processes;
    returns the job's exit status. Raises ``UserError`` before any rank starts."""
    n = options.nproc
    batch_size = prepared.config.settings["batch_size"]
    if int(batch_size) % n:
        raise UserError(f"--batch-size {batch_size} is the global batch: it must divide "
                        f"evenly across the {n} processes (--nproc {n})")
    args = rank_args(options, prepared.run_dir)
    if prepared.engine.name != "torch":
        _check_mpi()
    claimed = not (options.logdir or options.resume)
    if claimed:  # the ranks get --logdir: take the default directory (or the next free) here
        run_dir = runs.claim_new_dir(prepared.run_dir)
        args = rank_args(options, run_dir)
    status_dir = tempfile.mkdtemp(prefix="gradlog-ranks-")
    env = {STATUS_DIR_ENV: status_dir, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    try:
        if prepared.engine.name == "torch":
            exits = _torch_job(n, args, env)
        else:
            exits = _mpi_job(n, args, env, console)
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


# -- gradlog models: MPI ---------------------------------------------------------------------------
def _mpiexec() -> str | None:
    here = os.path.dirname(sys.executable)
    return shutil.which("mpiexec.gforker", path=here) or shutil.which("mpiexec.gforker")


def _check_mpi() -> None:
    """A user error unless mpi4py and the mpich wheel's launcher are installed."""
    from .. import distributed
    if not distributed.is_available() or _mpiexec() is None:
        raise UserError("--nproc trains gradlog models over MPI, which is not installed: "
                        "pip install 'gradlog[mpi]'")


# mpich 5.0.2's UCX (1.20.1) now and then fails MPI_Init on one host with this error (about 1
# launch in 150-300 on a loaded machine, also for a two-line mpi4py program; pmodels/mpich#7417)
MPI_INIT_FLAKE = "failed to unpack address, invalid bandwidth"


def _mpi_job(n: int, args: list[str], env: dict, console: Console) -> dict[int, str]:
    """Run the ranks under MPI; returns how each rank that did not exit cleanly ended, as the
    process manager saw it (``{rank: "signal KILL"}``). A job whose MPI_Init failed with the
    transient error above (nothing ran yet) is started once more."""
    ended, init_failed = _mpi_attempt(n, args, env, console)
    if ended and init_failed:
        console.notice("gradlog train: MPI_Init failed with mpich's transient UCX error "
                       "(pmodels/mpich#7417); starting the ranks once more")
        ended, _ = _mpi_attempt(n, args, env, console)
    return ended


def _mpi_attempt(n: int, args: list[str], env: dict,
                 console: Console) -> tuple[dict[int, str], bool]:
    mpiexec = _mpiexec()
    full_env = {**os.environ, **env, "UCX_NET_DEVICES": os.environ.get("UCX_NET_DEVICES", "lo")}
    proc = subprocess.Popen([mpiexec, "-n", str(n), *_rank_command(args)], env=full_env,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ended: dict[int, str] = {}
    init_failed = [False]

    def relay() -> None:  # the ranks' stderr through to ours, the manager's verdicts kept
        for line in proc.stderr:
            init_failed[0] = init_failed[0] or MPI_INIT_FLAKE in line
            found = _GFORKER_EXIT.match(line)
            if found:
                rank, code, sig = int(found[1]), int(found[2]), found[3]
                if sig and sig.strip() != "Quit":
                    ended[rank] = f"signal {_SIGNAL_NAMES.get(sig.strip(), sig.strip())}"
                elif not sig and code:
                    ended[rank] = f"status {code}"
                continue
            console.err.write(line)
            console.err.flush()

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    with _forwarding_signals(proc.pid):
        proc.wait()
    reader.join()
    return ended, init_failed[0]


class _forwarding_signals:
    """SIGINT and SIGTERM received here go to the process manager, which passes them on to
    every rank (once: a second signal would stop the ranks at once)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.saved = pid, {}

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.saved[signum] = signal.signal(signum, self._forward)

    def _forward(self, signum: int, frame: Any) -> None:
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            pass

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)


# -- PyTorch models: torch's launcher ----------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torch_job(n: int, args: list[str], env: dict) -> dict[int, str]:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    saved = {k: os.environ.get(k) for k in (*env, "GLOO_SOCKET_IFNAME")}
    os.environ.update(env)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # (torch's launcher keeps its per-rank error files in a directory it never removes; the
    # ranks' statuses are gradlog's own, so that directory goes with the job)
    logs = tempfile.TemporaryDirectory(prefix="gradlog-launch-", ignore_cleanup_errors=True)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=n, run_id=uuid.uuid4().hex,
                          rdzv_backend="static", rdzv_endpoint=f"127.0.0.1:{_free_port()}",
                          rdzv_configs={"rank": 0}, max_restarts=0, local_addr="127.0.0.1",
                          logs_specs=DefaultLogsSpecs(log_dir=logs.name))
    try:
        elastic_launch(config, sys.executable)(*_rank_command(args)[1:])
    except ChildFailedError as exc:
        return {int(rank): (f"signal {signal.Signals(-f.exitcode).name}" if f.exitcode < 0
                            else f"status {f.exitcode}")
                for rank, f in exc.failures.items()}
    finally:
        logs.cleanup()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {}


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
