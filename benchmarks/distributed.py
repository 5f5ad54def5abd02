"""W8: data-parallel throughput. W2's CNN at the global batch (64) trained by 1 process x 1
thread, then by 2 processes x 1 thread (32 samples each, gradients averaged), for gradlog's
DistributedDataParallel over MPI and, beside it, torch's DDP over gloo: samples per second,
the 2-process/1-process speed-up (target >= 1.6 for gradlog) and the communication share.

Each measurement is one launch of ``ddp_worker.py`` through the mpich wheel's launcher; the
launches are interleaved (A B C ... then reversed, block after block) so the machine's noise
falls on every contender alike, and a block's ratios compare launches of the same block.
Wall-clock seconds per step (rank 0's: the ranks wait for each other in the all-reduce),
medians over the steps of a launch, then medians (and min/max: the spread) over the blocks.
The communication share is measured two ways: the reducer's own time in MPI calls per step
(launching, polling and waiting for the buckets; gradlog only), and 1 - t(no_sync)/t(synced)
on 2 processes (what averaging costs, copies included; both engines).
``--quick`` runs a few steps of each and checks that 2 processes compute the 1-process losses.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gradlog.engines.launchers.mpi import init_failed

from .common import check_close, torch_or_none

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.6


def _launcher() -> str | None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    return shutil.which("mpiexec.gforker", path=str(Path(sys.executable).parent)) or \
        shutil.which("mpiexec.gforker")


def _launch(mpiexec: str, ranks: int, engine: str, mode: str, steps: int, warmup: int,
            workdir: str) -> dict:
    out = os.path.join(workdir, f"{engine}-{mode}-{ranks}.json")
    store = os.path.join(workdir, f"store-{engine}-{mode}-{ranks}")
    if os.path.exists(store):
        os.remove(store)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               UCX_NET_DEVICES="lo", GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(ROOT))
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "benchmarks.ddp_worker", engine,
           mode, str(steps), str(warmup), out, store]
    for _ in range(2):  # once more after one of mpich's transient MPI_Init failures
        proc = subprocess.Popen(cmd, env=env, cwd=str(ROOT), start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise RuntimeError(f"W8: {' '.join(cmd)} did not finish in 300 s") from None
        if proc.returncode == 0 or not init_failed(err):
            break
    if proc.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"W8: {' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
    with open(out) as f:
        return json.load(f)


def _contenders() -> list[tuple[str, str, int]]:
    engines = ["gradlog"] + (["torch"] if torch_or_none() is not None else [])
    return [(e, mode, ranks) for e in engines
            for mode, ranks in (("single", 1), ("ddp", 2), ("nosync", 2))]


def run(quick: bool, blocks: int) -> dict[str, Any]:
    mpiexec = _launcher()
    if mpiexec is None:
        return {"W8": {"skipped": "mpi4py and the mpich wheel are not installed "
                                  "(pip install 'gradlog[mpi]')"}}
    with tempfile.TemporaryDirectory(prefix="gradlog-w8-", ignore_cleanup_errors=True) as workdir:
        return _run_in(workdir, mpiexec, quick, blocks)


def _run_in(workdir: str, mpiexec: str, quick: bool, blocks: int) -> dict[str, Any]:
    if quick:
        return {"W8": _check(mpiexec, workdir)}
    load = [os.getloadavg()[0]]
    per_block: dict[tuple, list[dict]] = {c: [] for c in _contenders()}
    order = list(per_block)
    for block in range(blocks):
        for contender in (order if block % 2 == 0 else order[::-1]):
            engine, mode, ranks = contender
            per_block[contender].append(_launch(mpiexec, ranks, engine, mode, steps=40,
                                                warmup=5, workdir=workdir))
    load.append(os.getloadavg()[0])
    out: dict[str, Any] = {"load_avg_1min_before_after": load, "blocks": blocks}
    for engine in dict.fromkeys(e for e, _, _ in order):
        out[engine] = _summary(per_block, engine)
    out["target"] = f"gradlog speedup_2p >= {TARGET}"
    out["met"] = out["gradlog"]["speedup_2p"] >= TARGET
    return {"W8": out}


def _summary(per_block: dict, engine: str) -> dict[str, Any]:
    def step(result: dict) -> float:
        return statistics.median(result["seconds"])

    one = [step(r) for r in per_block[(engine, "single", 1)]]
    two = [step(r) for r in per_block[(engine, "ddp", 2)]]
    alone = [step(r) for r in per_block[(engine, "nosync", 2)]]
    speedups = [a / b for a, b in zip(one, two)]
    batch = per_block[(engine, "single", 1)][0]["global_batch"]
    summary = {"samples_per_s_1p": batch / statistics.median(one),
               "samples_per_s_2p": batch / statistics.median(two),
               "speedup_2p": statistics.median(speedups),
               "speedup_spread": [min(speedups), max(speedups)],
               "comm_share_nosync": statistics.median(1 - a / b for a, b in zip(alone, two))}
    comm = [r["comm_seconds"] / len(r["seconds"]) / step(r)
            for r in per_block[(engine, "ddp", 2)] if r["comm_seconds"] is not None]
    if comm:
        summary["comm_share_reducer"] = statistics.median(comm)
    return summary


def _check(mpiexec: str, workdir: str) -> dict[str, Any]:
    """2 processes train as 1 does at the global batch, for each engine."""
    checked = {}
    for engine in dict.fromkeys(e for e, _, _ in _contenders()):
        single = _launch(mpiexec, 1, engine, "single", steps=0, warmup=3, workdir=workdir)
        ddp = _launch(mpiexec, 2, engine, "ddp", steps=0, warmup=3, workdir=workdir)
        check_close(f"W8 {engine} 2 processes", single["losses"], ddp["losses"], 1e-5)
        checked[engine] = {"single": single["losses"], "ddp": ddp["losses"]}
    return {"checked": checked}
