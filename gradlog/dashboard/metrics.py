"""Which logged scalars feed which heat map, and which gradlog plugin writes them."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One heat map: the scalar tags ``pattern`` matches, one row per layer it names."""

    key: str
    label: str
    scale: str            # "log" (norms and ratios span decades) or "linear" (fractions)
    plugin: str           # the gradlog plugin that logs it (named when a run lacks the tags)
    pattern: re.Pattern
    histograms: str                  # a regex of the layer's histogram tags ({layer} escaped)
    flagged: bool = True             # vanishing / exploding layers are flagged
    excluded: tuple[str, ...] = ()   # names the pattern matches that are not layers

    def layer(self, tag: str) -> str | None:
        """The layer ``tag`` belongs to, or None when the tag is not this metric's."""
        match = self.pattern.fullmatch(tag)
        if match is None or match["layer"] in self.excluded:
            return None
        return match["layer"]

    def describe(self) -> dict:
        return {"key": self.key, "label": self.label, "scale": self.scale,
                "plugin": self.plugin, "flagged": self.flagged,
                "histograms": self.histograms}


METRICS = (
    Metric("grad_norm", "gradient norm", "log", "grad-norm",
           re.compile(r"grad-norm/(?P<layer>.+)"), r"^histogram/grad(_raw)?/{layer}\.",
           excluded=("global",)),
    Metric("update_ratio", "update-to-weight ratio", "log", "histogram",
           re.compile(r"histogram/update_ratio/(?P<layer>.+)"),
           r"^histogram/(weight|grad)/{layer}$"),
    Metric("dead_fraction", "dead-unit fraction", "linear", "activation-stats",
           re.compile(r"activation-stats/(?P<layer>.+)/(?:dead|saturated)_fraction"),
           r"^histogram/activation/{layer}$", flagged=False),
)
BY_KEY = {metric.key: metric for metric in METRICS}


def metric_named(key: str | None) -> Metric:
    """The metric called ``key``; a ValueError names the accepted keys otherwise."""
    if key not in BY_KEY:
        raise ValueError(f"metric must be one of {', '.join(BY_KEY)}; got {key!r}")
    return BY_KEY[key]


def layer_tags(metric: Metric, tags) -> dict[str, str]:
    """``{layer: tag}`` for the tags of ``metric`` among ``tags``."""
    found = {}
    for tag in tags:
        layer = metric.layer(tag)
        if layer is not None:
            found[layer] = tag
    return found
