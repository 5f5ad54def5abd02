"""W7: a PyTorch MLP step (W1's shapes) bare, inside ``gl.watch`` with no plugins, inside
``gl.watch`` with histogram + grad-norm at every=100 (the histogram's default kinds: weights,
raw and final gradients, activations, update ratios; and only weights and final gradients,
what ``wandb.watch(log="all")`` logs), and under ``wandb.watch(log="all", log_freq=100)`` in
offline mode when wandb is installed (the anchor users know), and inside ``gl.watch`` with the
doctor at its default cadence.

Side by side in one run, interleaved in blocks of 100 steps (each block holds exactly one
logging step of every=100 / log_freq=100), in rounds of one block of every contender; each
ratio to bare is the median over the rounds of a block's time over the bare blocks' of its
round, since the machine's speed drifts between rounds by more than the differences measured.
Each contender is three copies of its model (each with its own gl.watch run), timed a block
each in turn: identical bare models differ here by up to 2%, from where their memory lies, as
much as the differences measured. A second bare contender ("bare again", the same step)
measures the run's own noise: its ratio to bare is what the machine alone makes of no
difference at all; the watched contenders are compared with the mean of both bare
contenders' blocks. The clock is W4b-W4g's: **wall-clock** time, each gradlog block ending
with ``writer.flush()`` (what the writer's thread still owes is charged to the variant that
queued it); wandb's histograms are computed on the training thread, and what its service
process does later is not charged to it. Also reported: the process's CPU time (gradlog's
writer thread counted, wandb's process not) and the training thread's alone. The targets:
watch <= 1.03x bare, histogram + grad-norm <= 1.05x bare, the doctor <= 1.02x bare, and
gradlog's overhead (time above bare) at most half of wandb's. That last ratio divides two
differences of about 1% and 5% of a step, so block noise moves it a lot: each run also gives
its 90% interval (bootstrap over the rounds of blocks). ``--quick`` checks that the watched
runs train bit-identically to the bare one (observers leave the trajectory alone) and times
nothing. ``--device cuda`` runs every contender on the GPU (the model, its batches and
wandb's copies alike), each block's clock read after waiting for the GPU; without CUDA it says
so in one line and skips the row.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from typing import Any

import numpy as np

from .common import (
    Copies,
    bootstrap_interval,
    cycler,
    device_clock,
    device_missing,
    interleaved_copies,
    offline_wandb,
    torch_or_none,
    wandb_or_none,
)
from .mlp import TorchMLP, make_batches, make_weights

PER_BLOCK = 100  # steps per timing block: one logging step at every=100 in each
COPIES = 3  # of each contender, a block each in turn (see common.Copies)
PLUGINS = ["histogram:every=100", "grad-norm:every=100"]
AS_WANDB = ['histogram:every=100,kinds=["weight","grad"]', "grad-norm:every=100"]
DOCTOR = ["doctor"]  # at its default cadence (W9 measures it on W1's step as well)


def _watched(weights: list, plugins: list, logdir: str,
             device: str) -> tuple[TorchMLP, Any]:
    import gradlog as gl
    model = TorchMLP(weights, device)
    run = gl.watch(model.model, model.opt, logdir=logdir, plugins=plugins)
    return model, run


def _wandb_watched(weights: list, logdir: str,
                   device: str) -> tuple[list[TorchMLP], Any] | None:
    wandb = wandb_or_none()
    if wandb is None:
        return None
    run = wandb.init(mode="offline", dir=logdir, project="gradlog-w7", reinit=True)
    models = [TorchMLP(weights, device) for _ in range(COPIES)]
    for model in models:  # (one run watches them all, as wandb.watch allows)
        wandb.watch(model.model, log="all", log_freq=100)
    return models, run


def _paired(blocks: np.ndarray, reference: np.ndarray) -> float:
    """The median over the rounds of ``blocks`` over ``reference``, round by round. A round's
    blocks run within two seconds of one another, so the pairing cancels how the machine's
    speed drifts between rounds (here one contender's blocks range over +-20% of their
    median), which a ratio of each contender's own median keeps in."""
    return float(np.median(blocks / reference))


def _over_bare(samples: dict[str, np.ndarray], name: str) -> float:
    """``name``'s time over bare's: :func:`_paired` against the mean of the two bare
    contenders' blocks of each round (six models)."""
    return _paired(samples[name], (samples["bare"] + samples["bare again"]) / 2)


def _overhead_over_wandbs(name: str, runs: list[dict[str, np.ndarray]]) -> float:
    """``name``'s time above bare over wandb.watch's (the anchor), from the blocks' times of
    one or more runs by one clock (:func:`_over_bare`); over several runs, the sum of
    gradlog's overheads over the sum of wandb's."""
    ours = sum(_over_bare(samples, name) - 1 for samples in runs)
    theirs = sum(_over_bare(samples, "wandb.watch") - 1 for samples in runs)
    return float(ours / theirs) if theirs > 0 else float("inf")


def _trajectory(model: TorchMLP, batches: list, steps: int) -> list[float]:
    return [float(model.step(x, y)) for x, y in (batches * steps)[:steps]]


def run(quick: bool, blocks: int, device: str = "cpu") -> dict[str, Any]:
    torch = torch_or_none()
    if torch is None:
        return {"W7": {"skipped": "torch is not installed"}}
    missing = device_missing(torch, device)
    if missing is not None:
        print(f"W7: {missing}", file=sys.stderr, flush=True)
        return {"W7": {"skipped": missing}}
    with tempfile.TemporaryDirectory(prefix="gradlog-w7-", ignore_cleanup_errors=True) as logdir, \
            offline_wandb(os.path.join(logdir, "wandb-home")):
        return _run_in(logdir, quick, blocks, device)


def _run_in(logdir: str, quick: bool, blocks: int, device: str) -> dict[str, Any]:
    weights = make_weights()
    batches = make_batches(4 if quick else 16)
    if quick:
        bare = _trajectory(TorchMLP(weights, device), batches, 5)
        for name, plugins in (("watch", []), ("histogram+grad-norm", PLUGINS)):
            model, watch = _watched(weights, plugins, os.path.join(logdir, name), device)
            with watch:
                if _trajectory(model, batches, 5) != bare:
                    raise AssertionError(f"W7 {name}: the watched run's losses differ from "
                                         "the bare run's")
        return {"W7": {"checked": {"bare": bare}}}
    contenders = {name: Copies([cycler(TorchMLP(weights, device), batches)
                                for _ in range(COPIES)])
                  for name in ("bare", "bare again")}
    closers = []
    for name, plugins in (("watch", []), ("histogram+grad-norm", PLUGINS),
                          ("weight+grad histograms+grad-norm", AS_WANDB), ("doctor", DOCTOR)):
        steps, flushes = [], []
        for i in range(COPIES):
            model, watch = _watched(weights, plugins, os.path.join(logdir, f"{name}-{i}"),
                                    device)
            steps.append(cycler(model, batches))
            flushes.append(watch.writer.flush)
            closers.append(watch.close)
        contenders[name] = Copies(steps, flushes)
    anchor = _wandb_watched(weights, os.path.join(logdir, "wandb"), device)
    if anchor is not None:
        contenders["wandb.watch"] = Copies([cycler(model, batches) for model in anchor[0]])
        closers.append(anchor[1].finish)
    try:
        t = interleaved_copies(contenders, blocks=blocks, per_block=PER_BLOCK,
                               timer=device_clock(torch_or_none(), device))
    finally:
        for close in closers:
            close()
    out: dict[str, Any] = {"device": device, **{f"{k}_s": v.median for k, v in t.items()}}
    clocks = {"": "samples", " (process cpu)": "cpu_samples",
              # (the training thread alone: the writer's thread and wandb's process not in it)
              " (training thread cpu)": "thread_samples"}
    by_clock = {suffix: {k: np.array(getattr(v, field)) for k, v in t.items()}
                for suffix, field in clocks.items()}
    for suffix, samples in by_clock.items():
        # (what the machine alone makes of no difference at all, paired by round as well)
        out[f"bare again/bare{suffix}"] = _paired(samples["bare again"], samples["bare"])
        for k in t:
            if k not in ("bare", "bare again"):
                out[f"{k}/bare{suffix}"] = _over_bare(samples, k)
    out["targets"] = {"watch/bare <= 1.03": out["watch/bare"] <= 1.03,
                      "histogram+grad-norm/bare <= 1.05": out["histogram+grad-norm/bare"] <= 1.05,
                      "doctor/bare <= 1.02": out["doctor/bare"] <= 1.02}
    if "wandb.watch" in t:
        for name in ("histogram+grad-norm", "weight+grad histograms+grad-norm"):
            anchor = functools.partial(_overhead_over_wandbs, name)
            for suffix, samples in by_clock.items():
                out[f"{name} overhead / wandb's{suffix}"] = anchor([samples])
            # (the wall clock's, from resampled rounds: how far this run's noise can move it)
            out[f"{name} overhead / wandb's, 90% interval"] = bootstrap_interval(
                [by_clock[""]], anchor)
            out["targets"][f"{name}: overhead <= 0.5 x wandb's"] = (
                out[f"{name} overhead / wandb's"] <= 0.5)
    else:
        out["wandb"] = "not installed: the anchor was not measured"
    out["stat"] = "median over rounds of block / the round's bare blocks (wall clock)"
    # (for pooling runs: python -m benchmarks.torch_watch RESULTS.json ...)
    out["block_seconds"] = {k: v.samples for k, v in t.items()}
    return {"W7": out}


def pooled(paths: list[str]) -> dict[str, Any]:
    """The anchor over several W7 runs (their ``--json`` files): each run's own, and all of
    them together (gradlog's overheads added up over wandb's added up) with its 90% interval
    from the rounds resampled within each run. Runs are separate processes, so the
    memory placement that makes identical models differ by up to 2% is drawn anew in each."""
    runs = []
    for path in paths:
        with open(path) as f:
            blocks = json.load(f)["results"]["W7"]["block_seconds"]
        runs.append({k: np.array(v) for k, v in blocks.items()})
    out: dict[str, Any] = {"runs": len(runs)}
    for name in ("histogram+grad-norm", "weight+grad histograms+grad-norm"):
        anchor = functools.partial(_overhead_over_wandbs, name)
        out[f"{name} overhead / wandb's, each run"] = [anchor([r]) for r in runs]
        out[f"{name} overhead / wandb's, pooled"] = anchor(runs)
        out[f"{name} overhead / wandb's, pooled, 90% interval"] = bootstrap_interval(
            runs, anchor)
    return out


if __name__ == "__main__":
    for key, value in pooled(sys.argv[1:]).items():
        print(f"{key}: {value}")
