"""W10: a Lightning ``Trainer`` step (W1's MLP as a ``LightningModule``, SGD momentum, CPU)
bare, with ``GradlogCallback`` at its default plugins (histogram and grad-norm) and
``every=100``, and with the callback and no plugin (what driving the run costs), side by side
in one run.

A contender is one ``trainer.fit`` over ``WARMUP + PER_BLOCK`` batches; only the last
``PER_BLOCK`` are timed (by a callback listed after gradlog's: from the first timed batch's
start to the last one's end, gradlog's writer flushed before the clock stops, so what its
thread still owes is charged to it), which hold exactly two logging steps of every=100. Each
round fits every contender once, in an order that turns from round to round; the ratio is the
median over the rounds of a round's gradlog block over its bare blocks. A second bare
contender ("bare again") shows what the machine alone makes of no difference. Where wandb is
installed, a fit with Lightning's ``WandbLogger`` (offline, writing only into the benchmark's
temporary directory) and ``logger.watch(model, log="all", log_freq=100)`` runs beside them,
the anchor users know: its histograms are computed on the training thread, in the timed
window; what wandb's own process writes afterwards is not charged to it (as in W7). The
target: callback <= 1.05x bare. ``--quick`` checks that the callback leaves the losses
bit-identical and times nothing.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import numpy as np

from .common import offline_wandb, torch_or_none, wandb_or_none
from .mlp import LR, MOMENTUM, make_batches, make_weights, torch_mlp

WARMUP = 10
PER_BLOCK = 200  # timed batches: steps 100 and 200 log at every=100


def _lightning() -> Any:
    try:
        import lightning
    except ImportError:
        return None
    return lightning


def _module(L: Any, weights: list) -> Any:
    import torch

    class MLP(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch_mlp(weights)
            self.losses: list[float] = []

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            # (through self(x), as Lightning's examples do: wandb.watch's parameter
            # histograms come from a forward hook on the module it watches)
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self(x), y)
            self.losses.append(loss.detach())
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LR, momentum=MOMENTUM)
    return MLP()


def _timer(L: Any) -> Any:
    class Timer(L.Callback):
        """The seconds of the batches from ``WARMUP`` on, and their process CPU time."""

        def __init__(self, flush: Any) -> None:
            self.flush = flush
            self.seconds = self.cpu = 0.0

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == WARMUP:
                self._t, self._c = time.perf_counter(), time.process_time()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == WARMUP + PER_BLOCK - 1:
                self.flush()
                self.seconds = time.perf_counter() - self._t
                self.cpu = time.process_time() - self._c
    return Timer


def _fit(L: Any, weights: list, batches: list, logdir: str | None,
         plugins: Any = None, wandb_dir: str | None = None) -> tuple[Any, Any]:
    """One fit (with the callback when ``logdir`` is given: its default plugins unless
    ``plugins``; with ``WandbLogger.watch`` when ``wandb_dir`` is); returns its timer and its
    module (with the losses)."""
    from gradlog.integrations.lightning import DEFAULT_PLUGINS, GradlogCallback
    callbacks: list[Any] = []
    flush = _nothing
    if logdir is not None:
        gradlog = GradlogCallback(DEFAULT_PLUGINS if plugins is None else plugins,
                                  every=100, logdir=logdir)
        callbacks.append(gradlog)
        flush = lambda: gradlog.run.writer.flush()  # noqa: E731
    timer = _timer(L)(flush)
    module = _module(L, weights)
    logger: Any = False
    if wandb_dir is not None:
        from lightning.pytorch.loggers import WandbLogger
        logger = WandbLogger(offline=True, save_dir=wandb_dir, project="gradlog-w10")
        logger.watch(module, log="all", log_freq=100)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=logger,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[*callbacks, timer])
    import torch
    try:
        trainer.fit(module, torch.utils.data.DataLoader(batches, batch_size=None))
    finally:
        if logger:
            logger.experiment.finish()
    return timer, module


def _nothing() -> None:
    pass


def run(quick: bool, blocks: int) -> dict[str, Any]:
    L = _lightning()
    if torch_or_none() is None or L is None:
        return {"W10": {"skipped": "lightning (or torch) is not installed"}}
    import logging
    import warnings
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    import torch
    weights = make_weights()
    data = [(torch.from_numpy(x), torch.from_numpy(y))
            for x, y in make_batches(WARMUP + (5 if quick else PER_BLOCK))]
    with tempfile.TemporaryDirectory(prefix="gradlog-w10-", ignore_cleanup_errors=True) as tmp:
        if quick:
            bare = [float(v) for v in _fit(L, weights, data, None)[1].losses]
            ours = [float(v) for v in
                    _fit(L, weights, data, os.path.join(tmp, "quick"))[1].losses]
            if ours != bare:
                raise AssertionError("W10: the callback's losses differ from the bare fit's")
            return {"W10": {"checked": {"bare": bare}}}
        names: tuple[str, ...] = ("bare", "bare again", "gradlog callback",
                                  "callback, no plugins")
        plugins = {"gradlog callback": None, "callback, no plugins": ()}
        wandb = wandb_or_none() is not None
        if wandb:
            names += ("wandb watch",)
        seconds: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        with offline_wandb(os.path.join(tmp, "wandb")):
            for r in range(blocks):
                for name in np.roll(names, r):
                    logdir = os.path.join(tmp, f"r{r}-{name}") if name in plugins else None
                    watched = os.path.join(tmp, "wandb") if name == "wandb watch" else None
                    timer, _ = _fit(L, weights, data, logdir, plugins.get(name), watched)
                    seconds[name].append(timer.seconds)
                    cpu[name].append(timer.cpu)
    out: dict[str, Any] = {f"{n} per step_s": float(np.median(seconds[n])) / PER_BLOCK
                           for n in names}
    for suffix, samples in (("", seconds), (" (process cpu)", cpu)):
        s = {n: np.array(v) for n, v in samples.items()}
        bare = (s["bare"] + s["bare again"]) / 2
        out[f"bare again/bare{suffix}"] = float(np.median(s["bare again"] / s["bare"]))
        for name in (*plugins, *(("wandb watch",) if wandb else ())):
            out[f"{name}/bare{suffix}"] = float(np.median(s[name] / bare))
    if wandb:
        theirs = out["wandb watch/bare"] - 1
        out["gradlog callback overhead / wandb watch's"] = (
            (out["gradlog callback/bare"] - 1) / theirs if theirs > 0 else float("nan"))
    else:
        out["wandb watch"] = "wandb not installed: the WandbLogger.watch row is not measured"
    out["targets"] = {"gradlog callback/bare <= 1.05": out["gradlog callback/bare"] <= 1.05}
    out["stat"] = (f"median over {blocks} rounds of a fit's last {PER_BLOCK} steps / the "
                   "round's bare fits' (wall clock)")
    out["block_seconds"] = seconds
    return {"W10": out}
