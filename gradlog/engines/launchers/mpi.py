"""gradlog's own models on several processes: the mpich wheel's ``mpiexec`` (its fork-based
process manager, gforker: local processes, no control port listening on the network; MPI
itself on the loopback device). A failing or killed rank ends every rank (MPI aborts the job);
SIGINT/SIGTERM are passed on to the ranks through the process manager."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["check", "run_ranks", "init_failed", "MPI_INIT_FLAKES"]

# mpiexec.gforker's line for a rank that did not exit cleanly, e.g. "[0]1:Return code = 0,
# signaled with Killed" (strsignal's words; "Quit": the manager ending the other ranks)
_GFORKER_EXIT = re.compile(r"^\[\d+\](\d+):Return code = (-?\d+)(?:, signaled with (.+))?$")
_SIGNAL_NAMES = {signal.strsignal(s): s.name for s in signal.Signals if signal.strsignal(s)}


def _mpiexec() -> str | None:
    here = os.path.dirname(sys.executable)
    return shutil.which("mpiexec.gforker", path=here) or shutil.which("mpiexec.gforker")


def check() -> None:
    """ImportError, saying what to install, unless mpi4py and the mpich wheel's process
    manager are installed."""
    from ... import distributed
    if not distributed.is_available() or _mpiexec() is None:
        raise ImportError("--nproc trains gradlog models over MPI, which is not installed: "
                          "pip install 'gradlog[mpi]'")


# mpich 5.0.2's UCX (1.20.1) now and then fails MPI_Init on one host, before anything ran:
# "failed to unpack address, invalid bandwidth" (about 1 launch in 150-300 on a loaded machine,
# also for a two-line mpi4py program; pmodels/mpich#7417), and, rarer, a "Message truncated" in
# the communicator's set-up (MPIDI_UCX_comm_set_vcis), which mpich reports as a "Fatal error in
# internal_Init_thread". What a launch prints in either case:
MPI_INIT_FLAKES = ("failed to unpack address, invalid bandwidth",
                   "Fatal error in internal_Init_thread")


def init_failed(text: str) -> bool:
    """Whether a launch's output says MPI_Init failed (nothing ran yet: it may start again)."""
    return any(marker in text for marker in MPI_INIT_FLAKES)


def run_ranks(n: int, command: list[str], env: dict, err: TextIO,
              notice: Callable[[str], None]) -> dict[int, str]:
    """Run the ranks under MPI; returns how each rank that did not exit cleanly ended, as the
    process manager saw it (``{rank: "signal KILL"}``). A job whose MPI_Init failed with the
    transient errors above (nothing ran yet) is started once more."""
    ended, failed_init = _attempt(n, command, env, err)
    if ended and failed_init:
        notice("gradlog train: MPI_Init failed with one of mpich's transient UCX errors "
               "(e.g. pmodels/mpich#7417); starting the ranks once more")
        ended, _ = _attempt(n, command, env, err)
    return ended


def _attempt(n: int, command: list[str], env: dict, err: TextIO) -> tuple[dict[int, str], bool]:
    mpiexec = _mpiexec()
    full_env = {**os.environ, **env, "UCX_NET_DEVICES": os.environ.get("UCX_NET_DEVICES", "lo")}
    proc = subprocess.Popen([mpiexec, "-n", str(n), *command], env=full_env,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ended: dict[int, str] = {}
    failed_init = [False]

    def relay() -> None:  # the ranks' stderr through to ours, the manager's verdicts kept
        for line in proc.stderr:
            failed_init[0] = failed_init[0] or init_failed(line)
            found = _GFORKER_EXIT.match(line)
            if found:
                rank, code, sig = int(found[1]), int(found[2]), found[3]
                if sig and sig.strip() != "Quit":
                    ended[rank] = f"signal {_SIGNAL_NAMES.get(sig.strip(), sig.strip())}"
                elif not sig and code:
                    ended[rank] = f"status {code}"
                continue
            err.write(line)
            err.flush()

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    with _forwarding_signals(proc.pid):
        proc.wait()
    reader.join()
    return ended, failed_init[0]


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
