"""What every rule shares: its thresholds as a typed, overridable dataclass, and the test of
a condition that must hold for ``patience`` logged points in a row (one bad point is noise)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..findings import Finding
from ..trace import Series, Trace


@dataclass(frozen=True)
class Rule:
    """A kind of finding, its thresholds (a dataclass instance) and the function that looks
    for it: ``check(trace, thresholds) -> Finding | None``."""

    kind: str
    thresholds: Any
    check: Callable[[Trace, Any], Finding | None]
    advice: str

    def with_options(self, options: dict) -> Rule:
        """This rule with some thresholds replaced; an unknown key or a wrong type is a
        ValueError naming the rule, the key and the accepted keys."""
        known = {f.name: f for f in dataclasses.fields(self.thresholds)}
        for key, value in options.items():
            if key not in known:
                raise ValueError(f"doctor rule {self.kind!r} has no threshold {key!r}; "
                                 f"accepted: {', '.join(known)}")
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"doctor rule {self.kind!r}: {key} must be a number, got "
                                 f"{value!r}")
        return dataclasses.replace(self, thresholds=dataclasses.replace(self.thresholds,
                                                                        **options))

    def run(self, trace: Trace) -> Finding | None:
        finding = self.check(trace, self.thresholds)
        if finding is not None and not finding.advice:
            finding.advice = self.advice
        return finding


def first_sustained(mask: np.ndarray, patience: int) -> int | None:
    """The index where ``mask`` first holds for ``patience`` points in a row (fewer when the
    series ends sooner but holds to its end and has at least ``patience`` points), or None."""
    run = 0
    for i, bad in enumerate(mask.tolist()):
        run = run + 1 if bad else 0
        if run >= patience:
            return i - patience + 1
    return None


def per_layer_onsets(series: dict[str, Series], condition: Callable[[str, Series], np.ndarray],
                     patience: int) -> dict[str, int]:
    """``{layer: first step of a sustained run of condition}`` for the layers where it holds."""
    onsets = {}
    for layer, s in series.items():
        start = first_sustained(condition(layer, s), patience)
        if start is not None:
            onsets[layer] = int(s.steps[start])
    return onsets


def round_sig(value: float, digits: int = 4) -> float:
    """A number for evidence, short enough to read (non-finite values kept as they are)."""
    return float(f"{value:.{digits}g}") if np.isfinite(value) else float(value)
