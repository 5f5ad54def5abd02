"""The step driver: the one owner of a run's step, epoch, phase and batch state, and the one
place that fires the plugins' loop events.

Whoever knows where a step's boundaries are calls it: ``gradlog train``'s loop and framework
integrations directly, ``gl.watch`` through ``WatchAdapter`` (``adapter.py``), which only
translates hook calls into these calls. The moments are explicit:

* ``batch_start(batch)``: ``on_batch_start`` (a mutator may replace the batch); a batch still
  open is ended first.
* ``gradients_final()``: the gradients are accumulated, unscaled and about to be applied (in
  PyTorch, the optimizer's step pre-hook, which ``GradScaler.step`` reaches only after
  ``unscale_``). ``on_after_backward`` fires there (gradients as backward left them, before
  any mutator), then ``on_before_optimizer_step`` (mutators act in order, observers read the
  final gradients). Reading gradients at this one moment, never at the end of each backward,
  is what keeps partial sums of gradient accumulation, loss-scaled AMP gradients and another
  model's backward out of every gradient tag.
* ``step_end()``: the optimizer applied the step (``on_after_optimizer_step``).
* ``step_skipped()``: the step of this batch was not applied (an AMP loss scaler found inf or
  NaN); counted in ``amp_skipped_steps``. The step number still moves on at the batch's end,
  as Lightning's ``global_step`` and Hugging Face's ``state.global_step`` do, so a run's steps
  stay its loop's iterations.
* ``batch_end(metrics)``: ``on_batch_end``; the step moves on if the batch was stepped.
* ``validation_end(metrics)``, ``epoch_start()``, ``epoch_end()``, and ``in_phase(name)`` for
  passes that are not training (validation): nobody sets the phase from outside.

The state moves before the events that announce it fire: a plugin that raises
``StopTraining`` in ``on_after_optimizer_step`` or ``on_batch_end`` leaves the run at the step
the optimizer really reached, so a checkpoint written then resumes exactly, and the batch is
not ended (and its events fired) a second time at shutdown.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from .errors import SkipStep

__all__ = ["StepDriver"]


class StepDriver:
    """Step, epoch, phase and batch state of one run; fires the loop events through
    ``dispatcher``. ``metrics`` collects what the loop logs during a batch (handed to
    ``on_batch_end``); ``advanced()`` is called each time the step moves on (telemetry), and
    ``amp_skipped(count)`` at each step the loss scaler skipped (to log the count)."""

    def __init__(self, dispatcher: Any, advanced: Callable[[], None],
                 amp_skipped: Callable[[int], None]) -> None:
        self._dispatcher = dispatcher
        self._amp_skipped = amp_skipped
        self._advanced = advanced
        self.metrics: dict = {}
        self.step = 0
        self.epoch = 0
        self.phase = "train"
        self.in_batch = False
        self.stepped = False  # the optimizer applied (or skipped) this batch's step
        # batches announced since the step began (0: its first): with gradient accumulation
        # announced batch by batch, what observers log once per step they log at micro-batch 0
        self.micro_batch = 0
        self.skipped_steps = 0  # steps a plugin skipped (SkipStep)
        self.amp_skipped_steps = 0  # steps the loss scaler skipped (inf/NaN gradients)

    # -- training batches ---------------------------------------------------------------------
    def batch_start(self, batch: Any) -> Any:
        """Start a training batch; returns the batch (replaced by a mutator, or not). One
        started before the step of the open batch is a further micro-batch of that step."""
        self.micro_batch = self.micro_batch + 1 if self.in_batch and not self.stepped else 0
        if self.in_batch:
            self.batch_end()
        self.in_batch, self.stepped = True, False
        self._dispatcher.replacements.clear()
        return self._dispatcher.fire_chain("on_batch_start", "batch", batch)

    def _open(self) -> None:
        """A batch nobody announced (gradients before any forward the adapter saw)."""
        if not self.in_batch:
            self.in_batch, self.stepped = True, False

    def gradients_final(self, optimizer: Any = None) -> None:
        """The gradients ``optimizer`` is about to apply are final: ``on_after_backward``,
        then ``on_before_optimizer_step``. A plugin's ``SkipStep`` there clears every
        ``.grad`` of ``optimizer`` (the step then changes nothing) and is counted."""
        if not self.in_batch:
            self._open()
        fire = self._dispatcher.fire
        fire("on_after_backward")
        if optimizer is None:
            return
        try:
            fire("on_before_optimizer_step")
        except SkipStep:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
            self.skipped_steps += 1

    def backward_step(self) -> None:
        """Without an optimizer, a backward pass into the parameters is the step:
        ``on_after_backward``, and the batch is stepped."""
        self._open()
        self.stepped = True
        self._dispatcher.fire("on_after_backward")

    def step_end(self) -> None:
        """The optimizer applied the step (marked before ``on_after_optimizer_step`` fires)."""
        if not self.in_batch:
            self._open()
        self.stepped = True
        self._dispatcher.fire("on_after_optimizer_step")

    def step_skipped(self) -> None:
        """The loss scaler skipped this batch's step (inf or NaN in its gradients): counted;
        the step number moves on at the batch's end."""
        self._open()
        self.stepped = True
        self.amp_skipped_steps += 1
        self._amp_skipped(self.amp_skipped_steps)

    def batch_end(self, metrics: dict | None = None) -> None:
        """End the current batch: ``on_batch_end(metrics)``; the step moves on if the batch
        was stepped, also when a plugin raises there."""
        if not self.in_batch:
            return
        logged, self.metrics = self.metrics, {}
        self.in_batch = False
        stepped, self.stepped = self.stepped, False
        try:
            if self._dispatcher.listens_now("on_batch_end"):
                self._dispatcher.fire("on_batch_end", metrics={**logged, **(metrics or {})})
        finally:
            if stepped:
                self._advanced()
                self.step += 1
                self._dispatcher.at_step(self.step)

    def settle(self) -> None:
        """End a batch whose step is done (before a checkpoint: a clean step)."""
        if self.in_batch and self.stepped:
            self.batch_end()

    # -- epochs, validation, phases ---------------------------------------------------------
    def epoch_start(self) -> None:
        self._dispatcher.fire("on_epoch_start")

    def epoch_end(self) -> None:
        """``on_epoch_end``; the epoch counter moves on, also when a plugin raises there."""
        self.batch_end()
        try:
            self._dispatcher.fire("on_epoch_end")
        finally:
            self.epoch += 1

    def validation_end(self, metrics: dict) -> None:
        self.batch_end()
        self._dispatcher.fire("on_validation_end", metrics=dict(metrics))

    @contextlib.contextmanager
    def in_phase(self, phase: str) -> Iterator[None]:
        """``run.phase`` is ``phase`` inside the block (e.g. ``"validation"``): plugins' hooks
        log training passes only."""
        before, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = before

    def jump_to(self, step: int, epoch: int) -> None:
        """Restored from a checkpoint."""
        self.step, self.epoch, self.micro_batch = step, epoch, 0
        self.in_batch = self.stepped = False
        self._dispatcher.at_step(step)
