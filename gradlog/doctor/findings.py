"""What the doctor reports: a ``Finding`` per problem, with fixed kind names and fields, so that
a sweep, a test or another tool can read them (``gradlog doctor --json``)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

KINDS = ("vanishing_gradient", "exploding_gradient", "nonfinite", "dead_units",
         "small_update_ratio", "large_update_ratio", "poor_initialization",
         "saturated_activation", "loss_not_decreasing", "overfitting", "frozen_layer",
         "gradients_not_zeroed")


@dataclass
class Finding:
    """One problem: its ``kind`` (one of ``KINDS``), the ``layers`` involved (module or
    parameter names; empty when it is about the whole run), the first step it shows at, the
    values and thresholds that triggered it, one sentence, and what to try."""

    kind: str
    layers: list[str]
    first_step: int
    evidence: dict
    message: str
    advice: str = ""
    tags: list[str] = field(default_factory=list)  # the tags read (not part of the JSON)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {self.kind!r}")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "layers": list(self.layers), "first_step": self.first_step,
                "evidence": _plain(self.evidence), "message": self.message,
                "advice": self.advice}

    def line(self) -> str:
        """The one console line the live doctor prints when it first sees the problem."""
        where = f" in {', '.join(_shorten(self.layers))}" if self.layers else ""
        return f"doctor: {self.kind}{where} since step {self.first_step}: {self.message}"


def _shorten(layers: list[str], most: int = 4) -> list[str]:
    return layers if len(layers) <= most else layers[:most] + [f"(+{len(layers) - most} more)"]


def _plain(value):
    """``value`` with floats JSON can hold: a non-finite float becomes its name ("nan",
    "inf", "-inf"), since JSON has no literal for them."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def to_json(findings: list[Finding]) -> str:
    """``{"findings": [...]}``, as ``gradlog doctor --json`` prints it."""
    return json.dumps({"findings": [f.to_dict() for f in findings]}, indent=2)


def format_table(findings: list[Finding]) -> str:
    """The short table ``gradlog doctor`` prints: kind, first step, layers, the sentence and
    what to try."""
    if not findings:
        return "no findings: nothing the doctor's rules look for shows in this run\n"
    rows = [(f.kind, str(f.first_step), ", ".join(_shorten(f.layers)) or "(whole run)")
            for f in findings]
    widths = [max(len(r[i]) for r in rows + [("kind", "step", "layers")]) for i in range(3)]
    head = ("kind", "step", "layers")
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    for f, row in zip(findings, rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        lines.append(f"    {f.message}")
        if f.advice:
            lines.append(f"    try: {f.advice}")
    return "\n".join(lines) + "\n"


def report_json(results: dict[str, list[Finding]]) -> str:
    """``{"findings": [...]}`` of every run in ``results`` (``{run name: findings}``); with
    several runs each finding also names its ``run``."""
    several = len(results) > 1
    return json.dumps({"findings": [{**f.to_dict(), **({"run": run} if several else {})}
                                    for run, findings in results.items()
                                    for f in findings]}, indent=2)


def report_text(results: dict[str, list[Finding]]) -> str:
    """The table of each run, under its name when there are several."""
    if len(results) == 1:
        return format_table(next(iter(results.values())))
    return "\n".join(f"run {run}\n{format_table(findings)}" for run, findings in results.items())
