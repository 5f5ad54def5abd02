"""The ``nan-guard`` plugin: stop non-finite gradients before they reach the weights."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from gradlog.plugin import Plugin, PluginAbort, SkipStep


@dataclass
class Options:
    action: Literal["skip", "raise", "warn"] = field(default="skip", metadata={
        "help": "on a non-finite gradient: 'skip' the optimizer step (parameters, momentum and "
                "Adam state untouched), 'raise' (stop the run), or 'warn' (and step anyway)"})
    max_consecutive: int = field(default=10, metadata={
        "help": "with action=skip, stop the run as failed when this many steps in a row had "
                "non-finite gradients (a run that keeps producing NaN must fail, not idle)",
        "min": 1})
    check_loss: bool = field(default=True, metadata={
        "help": "also report a non-finite training loss (from the batch's metrics)"})


def _nonfinite(engine: Any, named_grads: list[tuple[str, Any]]) -> list[str]:
    """The names whose gradient holds a NaN or an Inf (counted by the engine, where the
    gradients live: one small transfer for all of them)."""
    counts = engine.nonfinite_counts([g for _, g in named_grads])
    return [name for (name, _), count in zip(named_grads, counts) if count]


class NanGuard(Plugin):
    """Stops NaN/Inf gradients before the update: names where they appeared, skips the step.

    Runs first (order 0), before grad-clip and grad-noise, so clipping never turns an Inf norm
    into silently zeroed gradients. The check is one dot product per parameter gradient. On a
    hit it names the first non-finite parameter in backward order (the order in which
    gradients were accumulated, recorded by post-accumulate-grad hooks: the layer closest to
    the loss, where the NaN was born, not the first layer of the model it spread to), its
    module and the step, in a warning and in the text ``nan-guard/report``.

    ``action=skip`` (default) raises SkipStep: every ``.grad`` is set to None and the
    optimizer leaves parameters, momentum and Adam state untouched; the running total is
    logged as ``nan-guard/skipped``. After ``max_consecutive`` non-finite steps in a row the
    run stops with PluginAbort. ``action=raise`` stops at the first one; ``action=warn`` lets
    the step happen. Every detection is counted in ``nan-guard/nonfinite_steps``; with
    ``check_loss``, a non-finite ``train/loss`` is reported and counted in
    ``nan-guard/nonfinite_loss``.
    """

    name = "nan-guard"
    kind = "mutator"
    order = 0
    Options = Options
    touches = ("post-accumulate-grad hooks (backward order)", "gradients before the step")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.skipped = 0
        self.detections = 0
        self.consecutive = 0
        self.nonfinite_losses = 0
        self.last_report = ""
        self._arrival: list[str] = []

    def setup(self, run: Any) -> None:
        self._params = [(n, p) for n, p in run.model.named_parameters() if p.requires_grad]
        for n, p in self._params:
            run.hooks.register_post_accumulate_grad_hook(p, self._arrived(n))

    def _arrived(self, name: str) -> Any:
        arrival = self._arrival

        def hook(param: Any) -> None:
            arrival.append(name)
        return hook

    def on_batch_start(self, run: Any) -> None:
        self._arrival.clear()

    def on_before_optimizer_step(self, run: Any) -> None:
        arrival = list(self._arrival)
        self._arrival.clear()  # in place: the hooks hold this list
        bad = _nonfinite(run.engine, [(n, p.grad) for n, p in self._params
                                      if p.grad is not None])
        if not bad:
            self.consecutive = 0
            return
        self.detections += 1
        self.consecutive += 1
        report = self._report(run, bad, arrival)
        run.log_scalar("nan-guard/nonfinite_steps", self.detections)
        action = self.options.action
        if action == "raise":
            self._tell(run, report)
            raise PluginAbort(report)
        if action == "warn":
            self._tell(run, report + "; the step is applied (action=warn)")
            return
        self.skipped += 1
        run.log_scalar("nan-guard/skipped", self.skipped)
        if self.consecutive >= self.options.max_consecutive:
            report += (f"; {self.consecutive} steps in a row had non-finite gradients "
                       f"(max_consecutive={self.options.max_consecutive}): stopping the run")
            self._tell(run, report)
            raise PluginAbort(report)
        self._tell(run, report + f"; step skipped ({self.skipped} skipped so far)")
        raise SkipStep(report)

    def _report(self, run: Any, bad: list[str], arrival: list[str]) -> str:
        bad_set = set(bad)
        in_order = [n for n in dict.fromkeys(arrival) if n in bad_set]
        first = in_order[0] if in_order else bad[0]
        where = "in backward order" if in_order else "in parameter order (no backward seen)"
        module = first.rpartition(".")[0] or "(root)"
        seen = set(in_order)
        names = in_order + [n for n in bad if n not in seen]
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        return (f"nan-guard: non-finite gradient at step {run.step}, first {where} in "
                f"parameter '{first}' (module '{module}'); {len(bad)} of {len(self._params)} "
                f"parameters affected: {shown}")

    def _tell(self, run: Any, message: str) -> None:
        self.last_report = message
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        run.log_text("nan-guard/report", message)

    def on_batch_end(self, run: Any, metrics: dict) -> None:
        loss = metrics.get("train/loss")
        if not self.options.check_loss or loss is None:
            return
        value = float(loss)
        if not math.isfinite(value):
            self.nonfinite_losses += 1
            run.log_scalar("nan-guard/nonfinite_loss", self.nonfinite_losses)
            self._tell(run, f"nan-guard: non-finite training loss {value} at step {run.step}")

    def state_dict(self) -> dict:
        return {"skipped": self.skipped, "detections": self.detections,
                "consecutive": self.consecutive, "nonfinite_losses": self.nonfinite_losses}

    def load_state_dict(self, state: dict) -> None:
        self.skipped = int(state.get("skipped", 0))
        self.detections = int(state.get("detections", 0))
        self.consecutive = int(state.get("consecutive", 0))
        self.nonfinite_losses = int(state.get("nonfinite_losses", 0))
