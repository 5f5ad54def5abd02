"""W9: the doctor's cost.

* Live: W1's step (gradlog's MLP) and W7's (the same shapes on PyTorch) bare and inside
  ``gl.watch(..., plugins=["doctor"])`` at its default cadence, side by side in one run,
  interleaved in blocks of 100 steps (each holds ten measuring steps), each contender three
  copies (``common.Copies``); the ratio is the median over rounds of a block's time over its
  round's bare block (wall clock, each watched block ending with ``writer.flush()``). Target:
  <= 1.02x bare on both. A second bare contender ("bare again", timed as the others) shows
  the run's noise: its ratio to the bare one would be 1.00 on a quiet machine. Three more
  show where the doctor's cost begins: ``gl.watch`` with no plugin (the adapter's own
  hooks, which every watched run pays), ``gl.watch`` plus a hand-written per-step NaN check
  (an optimizer step pre-hook asking whether the first bias's gradient sums to a finite
  number: the least a watch that finds a NaN's origin before the update can do, with no
  plugin code in it), and the doctor at ``every=100``.
* Offline: ``gradlog doctor`` (reading and every rule) on the log directory of a 10,000-step
  run as ``gradlog train`` writes it with its default plugins (the loss every step, grad-norm
  and the doctor's own tags every 10 steps, histograms every 100, validation every 100),
  written with ``SummaryWriter`` first. Target: < 5 s.

``--quick`` checks that the doctor leaves both trajectories bit-identical and reads a
500-step directory; it times nothing. ``python -m benchmarks.doctor`` runs the offline part
alone and prints its time.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np

from .common import Copies, cycler, interleaved_copies, torch_or_none
from .mlp import GradlogMLP, TorchMLP, make_batches, make_weights

PER_BLOCK = 100
COPIES = 3
LAYERS = 10  # modules of the synthetic 10,000-step run


def _watched(model: Any, logdir: str, plugins: list | None = None) -> Any:
    import gradlog as gl
    return gl.watch(model.model, model.opt, logdir=logdir,
                    plugins=["doctor"] if plugins is None else plugins)


def _add_finite_check(model: Any) -> None:
    """A NaN watch's floor: each step, before the update, whether the first bias's gradient
    sums to a finite number, read the cheapest way on each engine (a torch sum and ``item``;
    a numpy sum of the gradlog gradient's array, which its ``sum().item()`` would wrap in a
    tensor first)."""
    bias = list(model.model.parameters())[1]
    on_torch = model.lib.__name__ == "torch"

    def check(optimizer: Any, args: Any, kwargs: Any) -> None:
        grad = bias.grad
        total = grad.sum().item() if on_torch else float(np.add.reduce(grad.numpy()))
        if not math.isfinite(total):
            raise FloatingPointError("W9: a non-finite gradient")
    model.opt.register_step_pre_hook(check)


# the watched contenders: their plugins, and whether the hand-written check is added
WATCHED = {"doctor": (["doctor"], False), "watch": ([], False),
           "watch+check": ([], True), "doctor every=100": (["doctor:every=100"], False)}


def _paired(blocks: list[float], bare: list[float]) -> float:
    return float(np.median(np.asarray(blocks) / np.asarray(bare)))


def live(quick: bool, blocks: int, logdir: str) -> dict[str, Any]:
    weights = make_weights()
    batches = make_batches(4 if quick else 16)
    engines = {"W1": GradlogMLP}
    if torch_or_none() is not None:
        engines["W7"] = TorchMLP
    if quick:
        for name, make in engines.items():
            model = make(weights)
            bare = [model.step(*batches[i % len(batches)]) for i in range(12)]
            model = make(weights)
            with _watched(model, os.path.join(logdir, name)):
                doctored = [model.step(*batches[i % len(batches)]) for i in range(12)]
            if doctored != bare:
                raise AssertionError(f"W9 {name}: the doctor changed the losses")
        return {"checked": list(engines)}
    contenders, runs = {}, []
    for name, make in engines.items():
        for bare in (f"{name} bare", f"{name} bare again"):
            contenders[bare] = Copies([cycler(make(weights), batches) for _ in range(COPIES)])
        for what, (plugins, check) in WATCHED.items():
            steps, flushes = [], []
            for i in range(COPIES):
                model = make(weights)
                run = _watched(model, os.path.join(logdir, f"{name}-{what}-{i}"), plugins)
                if check:
                    _add_finite_check(model)
                runs.append(run)
                steps.append(cycler(model, batches))
                flushes.append(run.writer.flush)
            contenders[f"{name} {what}"] = Copies(steps, flushes)
    try:
        t = interleaved_copies(contenders, blocks=blocks, per_block=PER_BLOCK)
    finally:
        for run in runs:
            run.close()
    out: dict[str, Any] = {}
    for name in engines:
        ratio = _paired(t[f"{name} doctor"].samples, t[f"{name} bare"].samples)
        out[f"{name} doctor/bare"] = ratio
        for other in ("bare again", *(what for what in WATCHED if what != "doctor")):
            out[f"{name} {other}/bare"] = _paired(t[f"{name} {other}"].samples,
                                                  t[f"{name} bare"].samples)
        out[f"{name} bare ms"] = t[f"{name} bare"].median * 1e3
        out[f"{name} target doctor/bare <= 1.02"] = ratio <= 1.02
    return out


def write_run(logdir: str, steps: int) -> None:
    """A log directory like ``gradlog train``'s with the default plugins, ``steps`` long."""
    from gradlog.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    modules = [f"layer{i}" for i in range(LAYERS)]
    with SummaryWriter(logdir) as w:
        for step in range(steps):
            w.add_scalar("train/loss", 2.0 / (1 + step / 500) + 0.1 * rng.random(), step)
            if step % 10 == 0:
                w.add_scalar("grad-norm/global", 1.0 + rng.random(), step)
                w.add_scalar("doctor/grad_norm", 1.0 + rng.random(), step)
                w.add_scalar("doctor/grad_carried_over", 0.0, step)
                for m in modules:
                    w.add_scalar(f"grad-norm/{m}", 0.3 + rng.random(), step)
                    w.add_scalar(f"doctor/grad_norm/{m}", 0.3 + rng.random(), step)
                    w.add_scalar(f"doctor/activation_std/{m}", 1.0 + rng.random(), step)
                    w.add_scalar(f"doctor/dead_fraction/{m}", 0.1 * rng.random(), step)
                    for p in ("weight", "bias"):
                        w.add_scalar(f"doctor/update_ratio/{m}.{p}", 1e-3 * (1 + rng.random()),
                                     step)
                        w.add_scalar(f"doctor/no_grad/{m}.{p}", 0.0, step)
            if step % 100 == 0:
                w.add_scalar("val/loss", 2.0 / (1 + step / 500), step)
                for m in modules:
                    w.add_histogram(f"histogram/weight/{m}.weight", rng.standard_normal(256),
                                    step)
                    w.add_histogram(f"histogram/grad/{m}.weight", rng.standard_normal(256),
                                    step)


def offline(steps: int, logdir: str) -> dict[str, Any]:
    from gradlog.doctor import diagnose_logdir

    write_run(logdir, steps)
    start = time.perf_counter()
    results = diagnose_logdir(logdir)
    seconds = time.perf_counter() - start
    findings = [f.kind for found in results.values() for f in found]
    return {"steps": steps, "seconds": seconds, "findings": findings,
            "event_file_mb": sum(os.path.getsize(os.path.join(logdir, n))
                                 for n in os.listdir(logdir)) / 2**20,
            "target seconds < 5": seconds < 5}


def run(quick: bool, blocks: int) -> dict[str, Any]:
    logdir = tempfile.mkdtemp(prefix="gradlog-bench-")
    try:
        return {"W9": {"live": live(quick, blocks, os.path.join(logdir, "live")),
                       "offline": offline(500 if quick else 10_000,
                                          os.path.join(logdir, "offline"))}}
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="gradlog-bench-") as directory:
        print(offline(10_000, directory))
