"""The training loop: epochs of training batches, validation, the epoch-end events and a
checkpoint per epoch, with the standard metrics (``train/loss``, ``train/acc``, ``train/lr``,
``train/steps_per_sec``, ``val/loss``, ``val/acc``) logged at each batch's step.

Everything logged depends on the step only, never on when the run started: a run resumed at
any checkpoint logs what the uninterrupted run would have (``steps_per_sec`` every 20 steps
and at each epoch's last step, counted from the run's first step).

The loop announces each boundary to the run's step driver itself (``run.begin_batch``, the
gradients final before ``opt.step()`` and the step done after it, ``run.end_batch``,
``run.validating()``, ``run.validation_end``, ``run.epoch_end``): its run attaches no hook of
``gl.watch``. A plugin's ``StopTraining`` stops the run exactly where a resumed run goes
on: raised before a batch's step, the batch is done again (its random state and buffers are
restored, the checkpoint's loader position leaves it unread); raised after it (or at an
epoch's end), the step's (the epoch's) bookkeeping is finished first.

On several ranks (each training its rows of the global batch): ``train/loss`` and
``train/acc`` are the means over the ranks, a step is one global batch (``steps_per_sec``
counts them as rank 0 sees them: every rank steps together), validation sums every rank's
rows, and a stop asked on any rank stops all of them at the same batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..plugin.errors import StopTraining
from .built import Built
from .config import RunConfig
from .console import Console
from .errors import Interrupted
from .parallel import summed
from .signals import SignalOwner

__all__ = ["Loop", "SchedulerError", "accuracy"]

RATE_EVERY = 20  # steps between train/steps_per_sec points


class SchedulerError(RuntimeError):
    """A restored scheduler that cannot follow an extended run (its plan has ended)."""


def accuracy(engine: Any, output: Any, target: Any) -> float | None:
    """Accuracy when targets are class indices for a (batch, classes) output (values read
    through ``engine``, the run's)."""
    y = engine.to_numpy(target)
    out = engine.to_numpy(output)
    if y.dtype.kind not in "iu" or out.ndim != 2 or y.shape != out.shape[:1]:
        return None
    return float(np.mean(np.argmax(out, axis=1) == y))


class Loop:
    """The epochs from ``run.epoch`` to the configured total. ``checkpoint()`` is called at
    each epoch's end, after its validation and epoch-end events."""

    def __init__(self, run: Any, built: Built, config: RunConfig,
                 console: Console, signals: SignalOwner, checkpoint: Callable[[], None],
                 extended_from: int | None = None, model: Any = None) -> None:
        self.run, self.built, self.config = run, built, config
        self.model = model if model is not None else built.model  # or its DDP wrapper
        self.console, self.signals, self.checkpoint = console, signals, checkpoint
        self.scheduler = built.scheduler
        self.interval = built.scheduler_interval
        self.extended_from = extended_from  # the recorded epochs, when --epochs raised them
        self._stop: StopTraining | None = None  # a plugin's stop, kept until the step is done

    def run_epochs(self) -> None:
        run, epochs = self.run, self.config.epochs
        for _ in range(run.epoch, epochs):
            self.train_epoch()
            metrics = self.validate()
            self._deferring_stop(run.validation_end, metrics)
            self._deferring_stop(run.epoch_end)
            if self.scheduler is not None and self.interval == "epoch":
                self._step_scheduler()
            self.checkpoint()
            self.console.say(f"epoch {run.epoch}/{epochs}: "
                             + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
            self._stop_if_asked()

    def _step_scheduler(self) -> None:
        try:
            self.scheduler.step()
        except Exception as exc:
            if self.extended_from is None:
                raise
            raise SchedulerError(
                f"the scheduler ({type(self.scheduler).__name__}) cannot go on at step "
                f"{self.run.step}: {type(exc).__name__}: {exc}. The run was extended from "
                f"{self.extended_from} to {self.config.epochs} epochs, and a resumed scheduler "
                "keeps the plan it was built with (as in PyTorch)") from exc

    def _buffers(self) -> list:
        """The model's buffers and a copy of each (a few small tensors: running statistics)."""
        with self.run.engine.no_grad():
            return [(b, b.detach().clone()) for b in self.model.buffers()]

    def _deferring_stop(self, call: Callable[..., Any], *args: Any) -> None:
        """``call(*args)``; a ``StopTraining`` a plugin raises in it (a step's or an epoch's
        end events) is raised when the step's or the epoch's bookkeeping is complete, so that
        the checkpoint resumes exactly after it."""
        try:
            call(*args)
        except StopTraining as stop:
            self._stop = self._stop or stop

    def _stop_if_asked(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            raise stop
        requested = self.signals.requested
        if self.run.world_size > 1:  # every rank stops at the same batch
            requested = int(self.run.collectives.all_reduce([requested or 0], "max")[0]) or None
        if requested is not None:
            raise Interrupted(requested, graceful=True)

    def train_epoch(self) -> None:
        run, model, opt = self.run, self.model, self.built.optimizer
        loss_fn, loader = self.built.loss_fn, self.built.train_loader
        per_step = self.scheduler is not None and self.interval == "step"
        run.epoch_start()
        model.train()
        done = run.step - run.epoch * len(loader)  # > 0 in an epoch a resumed run continues
        progress = self.console.new_progress(
            len(loader), f"epoch {run.epoch + 1}/{self.config.epochs}", initial=done)
        last: dict = {}
        tick, ticks = time.perf_counter(), 0
        for batch in loader:
            random_state, buffers = run.engine.random_state(), self._buffers()
            try:
                x, y = run.begin_batch(batch)
                opt.zero_grad()
                output = model(x)
                loss = loss_fn(output, y)
                loss.backward()
                # logged before the step: a plugin stopping the run after the step leaves
                # it done and logged (the checkpoint then resumes after it)
                last = {"loss": run.log_scalar("train/loss", float(loss.item()),
                                               reduce="mean")}
                acc = accuracy(run.engine, output, y)
                if acc is not None:
                    last["acc"] = run.log_scalar("train/acc", acc, reduce="mean")
                run.log_scalar("train/lr", float(opt.param_groups[0]["lr"]))
                run.driver.gradients_final(opt)
                opt.step()
                run.driver.step_end()
            except StopTraining as stop:
                if not run.driver.stepped:
                    # stopped before the batch's step: the checkpoint resumes at this batch,
                    # with the random state and buffers (BatchNorm's statistics) it started
                    # with
                    run.engine.set_random_state(random_state)
                    with run.engine.no_grad():
                        for buffer, saved in buffers:
                            buffer.copy_(saved)
                    raise
                self._stop = stop  # after it: raised once the step's bookkeeping is done
            ticks += 1
            if (run.step + 1) % RATE_EVERY == 0 or (run.step + 1) % len(loader) == 0:
                now = time.perf_counter()
                run.log_scalar("train/steps_per_sec", ticks / max(now - tick, 1e-9))
                tick, ticks = now, 0
            if per_step:
                self._step_scheduler()
            self._deferring_stop(run.end_batch)
            done += 1
            progress.update(done, **last)
            self._stop_if_asked()
        progress.close(**last)

    def validate(self) -> dict:
        model, loss_fn = self.model, self.built.loss_fn
        was_training = model.training
        model.eval()
        total, correct, loss_sum, counted = 0, 0, 0.0, True
        try:
            with self.run.validating(), self.run.engine.no_grad():
                for x, y in self.built.val_loader:
                    output = model(x)
                    n = len(x)
                    loss_sum += float(loss_fn(output, y).item()) * n
                    acc = accuracy(self.run.engine, output, y)
                    if acc is None:
                        counted = False
                    else:
                        correct += acc * n
                    total += n
        finally:
            model.train(was_training)
        loss_sum, correct, total, uncounted = summed(
            self.run, [loss_sum, correct, total, 0.0 if counted else 1.0])
        counted = uncounted == 0
        metrics = {"val/loss": loss_sum / max(total, 1)}
        if counted and total:
            metrics["val/acc"] = correct / total
        return metrics
