"""What the rules read: a run's scalars and texts by tag, and which tags (gradlog's plugins',
the doctor's own ``doctor/...`` ones, and a few of other writers) carry which statistic.

The live doctor fills a ``Trace`` as it logs; the offline doctor fills one from the event files
(:mod:`.logdir`). The rules only see statistics by name, never a tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np


class Series(NamedTuple):
    steps: np.ndarray   # int64, ascending, each step once
    values: np.ndarray  # float64


# statistic -> tag patterns; the ``layer`` group names the layer (no group: the whole run).
# Where the live doctor logs a statistic itself, its ``doctor/...`` tag comes first.
STATISTICS: dict[str, tuple[str, ...]] = {
    "loss": (r"train/loss", r"train_loss", r"loss", r"Loss/train"),
    "val_loss": (r"val/loss", r"val_loss", r"Loss/val", r"validation/loss"),
    "grad_norm_global": (r"doctor/grad_norm", r"grad-norm/global", r"grad_2\.0_norm_total"),
    "grad_norm": (r"doctor/grad_norm/(?P<layer>.+)", r"grad-norm/(?P<layer>(?!global$).+)",
                  r"grad_2\.0_norm/(?P<layer>.+)"),
    "update_ratio": (r"doctor/update_ratio/(?P<layer>.+)",
                     r"histogram/update_ratio/(?P<layer>.+)"),
    "dead_fraction": (r"doctor/dead_fraction/(?P<layer>.+)",
                      r"activation-stats/(?P<layer>.+)/dead_fraction"),
    "saturated_fraction": (r"doctor/saturated_fraction/(?P<layer>.+)",
                           r"activation-stats/(?P<layer>.+)/saturated_fraction"),
    "activation_std": (r"doctor/activation_std/(?P<layer>.+)",
                       r"activation-stats/(?P<layer>.+)/std"),
    "carried_over": (r"doctor/grad_carried_over",),  # 1: .grad not zero before backward
    "missing_grad": (r"doctor/no_grad/(?P<layer>.+)",),  # 1: in the optimizer, grad None
    "nonfinite_steps": (r"doctor/nonfinite_steps", r"nan-guard/nonfinite_steps",
                        r"grad-clip/nonfinite_steps"),
}
_COMPILED = {stat: tuple(re.compile(p) for p in patterns) for stat, patterns in
             STATISTICS.items()}
NONFINITE_TEXT = "doctor/nonfinite"  # the live doctor's NaN origin, as JSON


def _series(points: dict[int, float]) -> Series:
    steps = np.fromiter(sorted(points), dtype=np.int64, count=len(points))
    values = np.fromiter((points[s] for s in steps.tolist()), dtype=np.float64,
                         count=len(points))
    return Series(steps, values)


@dataclass
class Trace:
    """A run's scalars (``{tag: {step: value}}``, a later value of a step replacing an earlier
    one, as after a resume) and texts (``{tag: {step: text}}``)."""

    scalars: dict[str, dict[int, float]] = field(default_factory=dict)
    texts: dict[str, dict[int, str]] = field(default_factory=dict)
    # The live doctor asks for every statistic at each check, a point or a few dozen later:
    # each tag's series is kept, and points added after its last step are appended to it
    # (any other point rebuilds that tag's series), so a check costs the new points, not
    # the run so far. Statistic name -> {layer: tag}, until a new tag appears.
    _kept: dict[str, Series] = field(default_factory=dict, repr=False, compare=False)
    _added: dict[str, list[tuple[int, float]]] = field(default_factory=dict, repr=False,
                                                       compare=False)
    _layers: dict[str, dict[str, str]] = field(default_factory=dict, repr=False,
                                               compare=False)

    def add_scalar(self, tag: str, step: int, value: float) -> None:
        points = self.scalars.get(tag)
        if points is None:
            points = self.scalars[tag] = {}
            self._layers.clear()
        step, value = int(step), float(value)
        added, kept = self._added.get(tag), self._kept.get(tag)
        if added is not None and step > added[-1][0]:
            added.append((step, value))
        elif added is None and kept is not None and step > int(kept.steps[-1]):
            self._added[tag] = [(step, value)]
        else:
            self._forget(tag)
        points[step] = value

    def add_text(self, tag: str, step: int, text: str) -> None:
        self.texts.setdefault(tag, {})[int(step)] = text

    def purge(self, step: int) -> None:
        """Forget every point at ``step`` or later: a resumed run starts again there."""
        for points in (*self.scalars.values(), *self.texts.values()):
            for late in [s for s in points if s >= step]:
                del points[late]
        self._kept.clear()
        self._added.clear()
        self._layers.clear()

    def _forget(self, tag: str) -> None:
        self._kept.pop(tag, None)
        self._added.pop(tag, None)

    def series(self, tag: str) -> Series:
        """The points of ``tag`` by step."""
        kept = self._kept.get(tag)
        added = self._added.pop(tag, None)
        if kept is None:
            kept = _series(self.scalars[tag])
        elif added:
            kept = Series(np.concatenate([kept.steps, np.fromiter(
                (s for s, _ in added), dtype=np.int64, count=len(added))]),
                np.concatenate([kept.values, np.fromiter(
                    (v for _, v in added), dtype=np.float64, count=len(added))]))
        if kept.steps.size:
            kept.steps.flags.writeable = kept.values.flags.writeable = False  # (kept: shared)
            self._kept[tag] = kept
        return kept

    def statistic(self, name: str) -> dict[str, Series]:
        """``{layer: Series}`` of the statistic ``name`` (the layer ``""`` for a statistic of
        the whole run). Where several tags give one layer's values, the first pattern of
        ``STATISTICS`` that matches any tag wins for that layer (the doctor's own first)."""
        if name not in self._layers:
            self._layers[name] = self._tags(name)
        return {layer: self.series(tag) for layer, tag in self._layers[name].items()
                if self.scalars[tag]}

    def _tags(self, name: str) -> dict[str, str]:
        found: dict[str, tuple[int, str]] = {}
        for tag in self.scalars:
            for rank, pattern in enumerate(_COMPILED[name]):
                match = pattern.fullmatch(tag)
                if match is None:
                    continue
                layer = match.groupdict().get("layer") or ""
                if layer not in found or rank < found[layer][0]:
                    found[layer] = (rank, tag)
                break
        return {layer: tag for layer, (_, tag) in found.items()}

    def tags_of(self, name: str) -> list[str]:
        """The tags the statistic ``name`` was read from (evidence for a finding)."""
        return sorted(t for t in self.scalars
                      if any(p.fullmatch(t) for p in _COMPILED[name]))
