"""W4b, W4d, W4e, W4f: W1's step inside ``gl.watch(model, opt, logdir=..., plugins=[...])``, as a
user writes it, with the writer's background thread on (the default) and off
(``SummaryWriter(background=False)``), side by side with the bare step in one interleaved run.
W4g does the same on a PyTorch MLP against ``wandb.watch`` once gradlog runs PyTorch models
(skipped until then, and without wandb).

* W4d: no plugins;
* W4e: the histogram plugin's defaults (weights, raw and final gradients, activations, update
  ratios; PyTorch's bins), every 100 steps;
* W4f: the same every step;
* W4b: weights and final gradients, 30 bins, every step.

Clocks: with the background thread on, the work is shared by two threads, so the step's cost is
**wall-clock** time, and every timed block ends with ``writer.flush()``: whatever the thread
still had to do is charged to the variant that queued it. Also reported: the CPU time of the
whole process (both threads: the total work, what a machine without a free core pays), each
thread's CPU time per step (the training thread's, and the rest: the writer's thread; neither
depends on the load) and how often the training thread waited for the queue. Blocks are 100
steps, so every-100-steps work is in each of them; each round of blocks runs the contenders
in another order (common.balanced_orders).
Each contender is three copies of its model, timed a block each in turn (W7's
``common.Copies``): identical models differ by up to 2% from where their memory lies.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from .common import (
    Copies,
    cycler,
    interleaved,
    interleaved_copies,
    offline_wandb,
    torch_or_none,
    wandb_or_none,
)
from .mlp import GradlogMLP, make_batches, make_weights

HISTOGRAM_DEFAULTS = "histogram"
VARIANTS = {  # name: (what, plugins, target ratio of the bare step)
    "W4d": ("gl.watch, no plugins", [], 1.03),
    "W4e": ("histogram defaults, every=100", [HISTOGRAM_DEFAULTS], 1.02),
    "W4f": ("histogram defaults, every=1", [HISTOGRAM_DEFAULTS + ":every=1"], 2.0),
    "W4b": ("weights + final grads, bins=30, every=1",
            ['histogram:every=1,bins=30,kinds=["weight","grad"]'], 1.3),
}
PER_BLOCK = 100
COPIES = 3  # of each contender, a block each in turn (see common.Copies)


class Watched:
    """A W1 model inside ``gl.watch``, logging to its own directory."""

    def __init__(self, weights: list, plugins: list, background: bool) -> None:
        import gradlog as gl
        from gradlog.tensorboard import SummaryWriter

        self.mlp = GradlogMLP(weights)
        self.logdir = tempfile.mkdtemp(prefix="gradlog-bench-")
        self.writer = SummaryWriter(self.logdir, background=background)
        self.run = gl.watch(self.mlp.model, self.mlp.opt, writer=self.writer, plugins=plugins)

    def close(self) -> None:
        self.run.close()
        self.writer.close()
        shutil.rmtree(self.logdir, ignore_errors=True)


def run(quick: bool, blocks: int) -> dict[str, Any]:
    weights, batches = make_weights(), make_batches(4 if quick else 16)
    if quick:
        checked = {name: check_variant(weights, batches, plugins)
                   for name, (_, plugins, _) in VARIANTS.items()}
        return {**checked, "W4g": torch_watch_overhead(quick=True)}
    watched = {f"{name}/{mode}": [Watched(weights, plugins, mode == "background")
                                  for _ in range(COPIES)]
               for name, (_, plugins, _) in VARIANTS.items()
               for mode in ("background", "synchronous")}
    contenders = {"plain": Copies([cycler(GradlogMLP(weights), batches)
                                   for _ in range(COPIES)])}
    contenders.update({key: Copies([cycler(w.mlp, batches) for w in ws],
                                   [w.writer.flush for w in ws])
                       for key, ws in watched.items()})
    if torch_or_none() is not None:  # what a PyTorch user writes by hand for W4b
        from .mlp import TorchMLP
        by_hand = [TorchMLP(weights) for _ in range(COPIES)]
        for model in by_hand:
            model.add_histogram_hooks()
        contenders["torch"] = Copies([cycler(TorchMLP(weights), batches)
                                      for _ in range(COPIES)])
        contenders["torch+np.histogram"] = Copies([cycler(m, batches) for m in by_hand])
    try:
        t = interleaved_copies(contenders, blocks=blocks, per_block=PER_BLOCK)
    finally:
        for ws in watched.values():
            for w in ws:
                w.close()
    results = {}
    for name, (what, plugins, limit) in VARIANTS.items():
        out: dict[str, Any] = {"what": what, "plugins": plugins}
        for mode in ("background", "synchronous"):
            key = f"{name}/{mode}"
            out[f"{mode}/plain (wall)"] = t[key].median / t["plain"].median
            ratios = [a / b for a, b in zip(t[key].samples, t["plain"].samples)]
            out[f"{mode}/plain (wall) spread"] = [min(ratios), max(ratios)]
            out[f"{mode}/plain (process cpu)"] = t[key].cpu_median / t["plain"].cpu_median
            # what does not depend on the load: each thread's CPU time per step, in ms
            out[f"{mode} training thread cpu ms"] = t[key].thread_median * 1e3
            out[f"{mode} other threads cpu ms"] = statistics.median(
                c - s for c, s in zip(t[key].cpu_samples, t[key].thread_samples)) * 1e3
            out[f"{mode} queue waits per step"] = (  # (the warm-up's steps included)
                sum(w.writer.queue_waits for w in watched[key])
                / ((blocks + COPIES) * PER_BLOCK))
        out["plain_ms"] = t["plain"].median * 1e3
        out["plain training thread cpu ms"] = t["plain"].thread_median * 1e3
        out["target"] = f"background/plain (wall) <= {limit}"
        out["met"] = out["background/plain (wall)"] <= limit
        results[name] = out
    if "torch" in t:
        results["W4b"]["torch np.histogram hooks/torch"] = (t["torch+np.histogram"].median
                                                             / t["torch"].median)
    results["W4g"] = torch_watch_overhead()
    return results


def check_variant(weights: list, batches: list, plugins: list) -> dict[str, Any]:
    """--quick: a few steps with the thread on and off; the losses must be the bare step's,
    bit for bit, and both writers must have logged the same events."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader

    from .common import check_close
    bare = GradlogMLP(weights)
    plain = [bare.step(x, y) for x, y in batches]
    logged = {}
    for background in (True, False):
        w = Watched(weights, plugins, background)
        try:
            losses = [w.mlp.step(x, y) for x, y in batches]
            w.run.close()
            check_close(f"{plugins} background={background}", plain, losses, 0.0)
            names = sorted(n for n in os.listdir(w.logdir) if "tfevents" in n)
            logged[background] = sum(1 for _ in RawEventFileLoader(
                f"{w.logdir}/{names[0]}").Load())
        finally:
            w.close()
    if logged[True] != logged[False]:
        raise AssertionError(f"{plugins}: {logged[True]} events in the background, "
                             f"{logged[False]} without")
    return {"checked": True, "events": logged[True]}


def torch_watch_overhead(quick: bool = False) -> dict[str, Any]:
    """W4g: a PyTorch MLP with the histogram plugin's defaults every step, against
    ``wandb.watch(model, log="all", log_freq=1)`` in offline mode; target: gradlog's overhead
    at most half of wandb's. Needs gradlog's PyTorch engine (``gradlog.engines``); ``quick``
    times two blocks of four steps."""
    if importlib.util.find_spec("torch") is None:
        return {"skipped": "torch is not installed"}
    if importlib.util.find_spec("gradlog.engines") is None:
        return {"skipped": "gradlog runs PyTorch models only once gradlog.engines exists"}
    import gradlog as gl

    from .mlp import TorchMLP
    weights, batches = make_weights(), make_batches(16)
    plain, watched = TorchMLP(weights), TorchMLP(weights)
    logdir = tempfile.mkdtemp(prefix="gradlog-bench-")
    run = gl.watch(watched.model, watched.opt, logdir=logdir,
                   plugins=[HISTOGRAM_DEFAULTS + ":every=1"])
    contenders = {"plain": cycler(plain, batches), "gradlog": cycler(watched, batches)}
    after_block = {"gradlog": run.writer.flush}
    try:
        with offline_wandb(os.path.join(logdir, "wandb-home")):
            wandb_run = _wandb_watched(weights, contenders, os.path.join(logdir, "wandb"))
            try:
                t = interleaved(contenders, blocks=2 if quick else 9,
                                per_block=4 if quick else PER_BLOCK,
                                warmup=1 if quick else PER_BLOCK, timer=time.perf_counter,
                                after_block=after_block)
            finally:
                if wandb_run is not None:
                    wandb_run.finish()
    finally:
        run.close()
        shutil.rmtree(logdir, ignore_errors=True)
    out: dict[str, Any] = {"gradlog/plain (wall)": t["gradlog"].median / t["plain"].median,
                           "gradlog/plain (process cpu)": (t["gradlog"].cpu_median
                                                           / t["plain"].cpu_median),
                           "plain training thread cpu ms": t["plain"].thread_median * 1e3,
                           "gradlog training thread cpu ms": t["gradlog"].thread_median * 1e3,
                           "gradlog other threads cpu ms": statistics.median(
                               c - s for c, s in zip(t["gradlog"].cpu_samples,
                                                     t["gradlog"].thread_samples)) * 1e3}
    if "wandb" in t:
        out["wandb/plain (wall)"] = t["wandb"].median / t["plain"].median
        out["wandb training thread cpu ms"] = t["wandb"].thread_median * 1e3
        out["target"] = "gradlog's overhead <= half of wandb's"
        out["met"] = (out["gradlog/plain (wall)"] - 1) <= 0.5 * (out["wandb/plain (wall)"] - 1)
    else:
        out["wandb"] = "not installed: gradlog's ratio only"
    return out


def _wandb_watched(weights: list, contenders: dict, directory: str) -> Any:
    wandb = wandb_or_none()
    if wandb is None:
        return None
    os.makedirs(directory)

    from .mlp import TorchMLP
    model = TorchMLP(weights)
    wandb_run = wandb.init(mode="offline", dir=directory)
    wandb.watch(model.model, log="all", log_freq=1)
    step = cycler(model, make_batches(16))

    def logged_step() -> None:  # wandb.watch's histograms go out with each wandb.log
        wandb.log({"loss": step()})

    contenders["wandb"] = logged_step
    return wandb_run
