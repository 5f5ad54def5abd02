"""The ``lr-monitor`` plugin: learning rate and momentum per parameter group, when they change."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gradlog.plugin import Plugin


@dataclass
class Options:
    momentum: bool = field(default=True, metadata={
        "help": "also log the momentum (SGD, RMSprop) or beta1 (Adam, AdamW) of each group"})
    weight_decay: bool = field(default=False, metadata={
        "help": "also log the weight decay of each group"})


class LRMonitor(Plugin):
    """Learning rate (and momentum / beta1) per parameter group, logged when it changes.

    Read after each optimizer step, so the value logged at step k is the one that step used
    (schedulers step after the optimizer, so a change shows at the first step that uses it).
    A point is written at the first step and then only at steps where the value differs from
    the last one logged: a constant rate costs one point, StepLR one per decay, OneCycleLR or
    cosine annealing one per step. Tags: ``lr-monitor/lr`` with a single parameter group,
    ``lr-monitor/lr/group<i>`` with several; likewise ``lr-monitor/momentum`` (groups with a
    ``momentum`` option), ``lr-monitor/beta1`` (groups with ``betas``) and, when enabled,
    ``lr-monitor/weight_decay``.
    """

    name = "lr-monitor"
    kind = "observer"
    order = 100
    Options = Options
    touches = ("optimizer param_groups (read after each step)",)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._last: dict[str, float] = {}

    def _values(self, groups: list[dict]) -> dict[str, float]:
        single = len(groups) == 1
        out: dict[str, float] = {}
        for i, group in enumerate(groups):
            suffix = "" if single else f"/group{i}"
            out[f"lr-monitor/lr{suffix}"] = float(group["lr"])
            if self.options.momentum:
                if "momentum" in group:
                    out[f"lr-monitor/momentum{suffix}"] = float(group["momentum"])
                elif "betas" in group:
                    out[f"lr-monitor/beta1{suffix}"] = float(group["betas"][0])
            if self.options.weight_decay and "weight_decay" in group:
                out[f"lr-monitor/weight_decay{suffix}"] = float(group["weight_decay"])
        return out

    def on_after_optimizer_step(self, run: Any) -> None:
        if run.optimizer is None:
            return
        for tag, value in self._values(run.optimizer.param_groups).items():
            if self._last.get(tag) != value:
                self._last[tag] = value
                run.log_scalar(tag, value)

    def state_dict(self) -> dict:
        # Resuming continues the change detection (no duplicate point at the resume step).
        return {"tags": list(self._last), "values": [float(v) for v in self._last.values()]}

    def load_state_dict(self, state: dict) -> None:
        self._last = {str(t): float(v) for t, v in zip(state.get("tags", []),
                                                       state.get("values", []))}
