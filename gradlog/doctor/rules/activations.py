"""Rules over per-layer activation statistics: dead units, saturation, a poor start."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..findings import Finding
from ..trace import Trace
from .base import Rule, per_layer_onsets, round_sig


@dataclass(frozen=True)
class Fraction:
    fraction: float = 0.5  # more than this: SageMaker Debugger DeadRelu's threshold_layer (50 %)
    patience: int = 5


def _fraction_finding(kind: str, statistic: str, trace: Trace, t: Fraction,
                      words: str) -> Finding | None:
    series = trace.statistic(statistic)
    onsets = per_layer_onsets(series, lambda _l, s: s.values > t.fraction, t.patience)
    if not onsets:
        return None
    layers = sorted(onsets, key=lambda layer: (onsets[layer], layer))
    last = {layer: round_sig(float(series[layer].values[-1])) for layer in layers}
    return Finding(kind, layers, min(onsets.values()),
                   {f"{statistic}_last": last, "threshold": t.fraction, "patience": t.patience},
                   f"{last[layers[0]]:.0%} of the units of {layers[0]} are {words} "
                   f"(more than {t.fraction:.0%} for {t.patience} logged points in a row)",
                   tags=trace.tags_of(statistic))


def dead(trace: Trace, t: Fraction) -> Finding | None:
    return _fraction_finding("dead_units", "dead_fraction", trace, t,
                             "dead (zero for every probe input)")


def saturated(trace: Trace, t: Fraction) -> Finding | None:
    return _fraction_finding("saturated_activation", "saturated_fraction", trace, t,
                             "saturated (in the flat tails, where the gradient is ~0)")


@dataclass(frozen=True)
class Initialization:
    std_ratio: float = 100.0  # largest over smallest activation std across layers, at start


def poor_init(trace: Trace, t: Initialization) -> Finding | None:
    stds = {layer: s for layer, s in trace.statistic("activation_std").items()}
    if len(stds) < 2:
        return None
    first = min(int(s.steps[0]) for s in stds.values())
    # a layer whose std is 0 is dead, the dead_units rule's business
    at_start = {layer: float(s.values[0]) for layer, s in stds.items()
                if int(s.steps[0]) == first and np.isfinite(s.values[0]) and s.values[0] > 0}
    if len(at_start) < 2:
        return None
    low = min(at_start, key=at_start.get)
    high = max(at_start, key=at_start.get)
    ratio = at_start[high] / at_start[low] if at_start[low] > 0 else np.inf
    if ratio < t.std_ratio:
        return None
    return Finding(
        "poor_initialization", sorted({low, high}), first,
        {"activation_std": {k: round_sig(v) for k, v in at_start.items()},
         "ratio": round_sig(ratio), "threshold_ratio": t.std_ratio},
        f"at the start the activations' spread differs {ratio:.3g}x between layers "
        f"({high}: {at_start[high]:.3g}, {low}: {at_start[low]:.3g}): signals shrink or grow "
        "layer by layer",
        tags=trace.tags_of("activation_std"))


RULES = (
    Rule("dead_units", Fraction(), dead,
         "check the biases and initialization before the layer (a large negative bias kills "
         "ReLUs), lower the learning rate, or use LeakyReLU/GELU"),
    Rule("saturated_activation", Fraction(), saturated,
         "normalize the layer's input (BatchNorm/LayerNorm), scale the initialization down, "
         "or use ReLU/GELU"),
    Rule("poor_initialization", Initialization(), poor_init,
         "initialize for the activation: nn.init.kaiming_normal_ for ReLU, xavier_normal_ for "
         "tanh/sigmoid (std about 1/sqrt(fan_in))"),
)
