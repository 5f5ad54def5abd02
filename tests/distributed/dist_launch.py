"""Start a program on several processes for a test and always stop it: every launch has a
timeout, runs in its own session and is killed by process group when it overruns (or when the
test fails). Nothing listens beyond 127.0.0.1: MPI jobs use the mpich wheel's fork-based
process manager (``mpiexec.gforker``: no control port; ``mpiexec.hydra`` listens on every
interface) with UCX on the loopback device; torchrun and gloo use 127.0.0.1 and a free port.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from gradlog.engines.launchers.mpi import init_failed

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "dist_workers.py"
BIN = Path(sys.executable).parent


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str

    def results(self, out: Path, n: int) -> list[dict]:
        """What each rank of a worker scenario wrote (rank order)."""
        files = [out / f"rank{k}.json" for k in range(n)]
        missing = [f.name for f in files if not f.exists()]
        if missing:
            pytest.fail(f"ranks wrote no result ({', '.join(missing)}); exit "
                        f"{self.returncode}\nstdout:\n{self.stdout[-3000:]}\n"
                        f"stderr:\n{self.stderr[-3000:]}")
        return [json.loads(f.read_text()) for f in files]


def mpiexec_path() -> str:
    pytest.importorskip("mpi4py")
    path = shutil.which("mpiexec.gforker", path=str(BIN)) or shutil.which("mpiexec.gforker")
    if path is None:
        pytest.skip("the mpich wheel's mpiexec is not installed (pip install 'gradlog[mpi]')")
    return path


def local_env(**extra: str) -> dict:
    env = dict(os.environ)
    env.update({"UCX_NET_DEVICES": "lo", "FI_TCP_IFACE": "lo", "GLOO_SOCKET_IFNAME": "lo",
                "MASTER_ADDR": "127.0.0.1", "OMP_NUM_THREADS": "1",
                "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONPATH": os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])})
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str], *, timeout: float, env: dict | None = None,
        cwd: str | None = None) -> Finished:
    """Run ``cmd`` to the end (or kill its whole process group after ``timeout`` s); once
    more if MPI_Init failed with one of mpich's transient UCX errors, before anything ran."""
    done = _run_once(cmd, timeout=timeout, env=env, cwd=cwd)
    if done.returncode != 0 and init_failed(done.stderr + done.stdout):
        done = _run_once(cmd, timeout=timeout, env=env, cwd=cwd)
    return done


def _run_once(cmd: list[str], *, timeout: float, env: dict | None = None,
              cwd: str | None = None) -> Finished:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or local_env(), cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s\nstdout:\n"
                    f"{out[-3000:]}\nstderr:\n{err[-3000:]}")
    except BaseException:
        _kill_group(proc.pid)
        proc.communicate()
        raise
    _kill_group(proc.pid)  # a rank left behind by a launcher that already exited
    return Finished(proc.returncode, out, err)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def mpi(n: int, *args: str, timeout: float = 120, **env: str) -> Finished:
    """``mpiexec -n N python dist_workers.py ARGS``."""
    return run([mpiexec_path(), "-n", str(n), sys.executable, str(WORKERS), *args],
               timeout=timeout, env=local_env(**env))


def torchrun(n: int, *args: str, timeout: float = 180, **env: str) -> Finished:
    """``torchrun --nproc-per-node N dist_workers.py ARGS`` on 127.0.0.1 (with the launcher's
    log directory, which torch keeps, in a temporary one that goes afterwards)."""
    pytest.importorskip("torch")
    with tempfile.TemporaryDirectory(prefix="gradlog-test-torchrun-") as logs:
        return run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
                    "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                    "--log-dir", logs, str(WORKERS), *args], timeout=timeout,
                   env=local_env(**env))
