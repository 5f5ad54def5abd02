"""Rules over gradient norms: vanishing, exploding, non-finite, never zeroed."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from ..findings import Finding
from ..trace import NONFINITE_TEXT, Series, Trace
from .base import Rule, first_sustained, per_layer_onsets, round_sig


@dataclass(frozen=True)
class Vanishing:
    relative: float = 1e-4  # a layer's norm below this fraction of the largest layer's
    patience: int = 5       # logged points in a row


def _largest_per_step(series: dict[str, Series]) -> dict[int, float]:
    largest: dict[int, float] = {}
    for s in series.values():
        for step, value in zip(s.steps.tolist(), s.values.tolist()):
            if np.isfinite(value):
                largest[step] = max(largest.get(step, 0.0), abs(value))
    return largest


def vanishing(trace: Trace, t: Vanishing) -> Finding | None:
    norms = trace.statistic("grad_norm")
    if len(norms) < 2:
        return None
    largest = _largest_per_step(norms)

    def small(_layer: str, s: Series) -> np.ndarray:
        top = np.array([largest.get(step, 0.0) for step in s.steps.tolist()])
        return (top > 0) & np.isfinite(s.values) & (np.abs(s.values) < t.relative * top)

    onsets = per_layer_onsets(norms, small, t.patience)
    if not onsets:
        return None
    layers = sorted(onsets, key=lambda layer: (onsets[layer], layer))
    first = min(onsets.values())
    worst = layers[0]
    s = norms[worst]
    at = int(np.searchsorted(s.steps, onsets[worst]))
    value, top = float(s.values[at]), largest[onsets[worst]]
    return Finding(
        "vanishing_gradient", layers, first,
        {"layer": worst, "grad_norm": round_sig(value), "largest_layer_grad_norm":
         round_sig(top), "ratio": round_sig(value / top), "threshold_ratio": t.relative,
         "patience": t.patience},
        f"the gradient reaching {worst} is {value / top:.1e} of the largest layer's "
        f"(below {t.relative:g} for {t.patience} logged points in a row): it barely learns",
        tags=trace.tags_of("grad_norm"))


@dataclass(frozen=True)
class Exploding:
    factor: float = 100.0   # the global norm above this multiple of its start
    baseline: int = 5       # the start: the smallest of the first this many positive points
    patience: int = 3


def _baseline(s: Series, points: int) -> float | None:
    """The smallest of the first ``points`` finite positive values: a start that an
    explosion already under way in those points does not raise."""
    finite = s.values[np.isfinite(s.values) & (s.values > 0)][:points]
    return float(finite.min()) if finite.size else None


def _explosion(values: np.ndarray, limit: float, patience: int) -> int | None:
    """Where the norm first goes above ``limit`` (finite) and stays above it for ``patience``
    points, or until it overflows to Inf or NaN: an explosion that ends in an overflow
    sooner is one too. (A NaN with no finite rise before it is the nonfinite rule's.)"""
    run_start, count = None, 0
    for i, value in enumerate(values.tolist()):
        if math.isfinite(value) and value > limit:
            run_start = i if run_start is None else run_start
            count += 1
        elif not math.isfinite(value) and run_start is not None:
            return run_start
        else:
            run_start, count = None, 0
        if count >= patience:
            return run_start
    return None


def exploding(trace: Trace, t: Exploding) -> Finding | None:
    total = trace.statistic("grad_norm_global").get("")
    if total is None or total.values.size < t.baseline + t.patience:
        return None
    base = _baseline(total, t.baseline)
    if base is None:
        return None
    start = _explosion(total.values, t.factor * base, t.patience)
    if start is None:
        return None
    step, value = int(total.steps[start]), float(total.values[start])
    layers = []
    for layer, s in trace.statistic("grad_norm").items():
        own = _baseline(s, t.baseline)
        at = np.searchsorted(s.steps, step)
        if own is not None and at < s.steps.size and s.values[at] > t.factor * own:
            layers.append(layer)
    return Finding(
        "exploding_gradient", sorted(layers), step,
        {"grad_norm": round_sig(value), "baseline": round_sig(base), "factor": t.factor,
         "patience": t.patience},
        f"the gradient norm grew to {value:.3g}, {value / base:.0f}x its start ({base:.3g}), "
        f"and stayed above {t.factor:g}x for {t.patience} logged points",
        tags=trace.tags_of("grad_norm_global"))


@dataclass(frozen=True)
class Nonfinite:
    pass


def _first_nonfinite(series: dict[str, Series]) -> dict[str, int]:
    found = {}
    for layer, s in series.items():
        bad = np.flatnonzero(~np.isfinite(s.values))
        if bad.size:
            found[layer] = int(s.steps[bad[0]])
    return found


def nonfinite(trace: Trace, _t: Nonfinite) -> Finding | None:
    origins = sorted(trace.texts.get(NONFINITE_TEXT, {}).items())
    if origins:  # the live doctor found where it started
        step, text = origins[0]
        origin = json.loads(text)
        return Finding("nonfinite", origin["layers"], step, origin["evidence"],
                       origin["message"], tags=[NONFINITE_TEXT])
    candidates: dict[str, int] = {}
    for name in ("loss", "grad_norm_global"):
        first = _first_nonfinite(trace.statistic(name)).get("")
        if first is not None:
            candidates[name] = first
    counted = trace.statistic("nonfinite_steps").get("")
    if counted is not None and (counted.values > 0).any():
        candidates["nonfinite_steps"] = int(counted.steps[np.argmax(counted.values > 0)])
    layer_steps = _first_nonfinite(trace.statistic("grad_norm"))
    if layer_steps:
        candidates["grad_norm"] = min(layer_steps.values())
    if not candidates:
        return None
    step = min(candidates.values())
    layers = sorted(layer for layer, s in layer_steps.items() if s == step)
    where = ", ".join(sorted(name for name, s in candidates.items() if s == step))
    return Finding(
        "nonfinite", layers, step, {"first_nonfinite": where, "steps": candidates},
        f"NaN or Inf first appeared at step {step} (in {where})"
        + (f", in the gradients of {', '.join(layers)}" if layers else ""))


@dataclass(frozen=True)
class NotZeroed:
    growth: float = 5.0      # the global norm grows to this multiple of its start ...
    points: int = 20         # ... over its first this many logged points ...
    rising: float = 0.9      # ... rising between this fraction of consecutive points ...
    linearity: float = 0.95  # ... and nearly in a straight line (R^2 of norm vs step)
    patience: int = 3        # (doctor/grad_carried_over: logged points in a row)


def not_zeroed(trace: Trace, t: NotZeroed) -> Finding | None:
    carried = trace.statistic("carried_over").get("")
    if carried is not None:  # the live doctor saw it directly
        start = first_sustained(carried.values == 1, t.patience)
        if start is None:
            return None
        return Finding(
            "gradients_not_zeroed", [], int(carried.steps[start]),
            {"grad_before_backward": "not zero", "patience": t.patience},
            f"the gradients still held the previous step's values when backward began, "
            f"at {t.patience} logged steps in a row: they add up from step to step",
            tags=trace.tags_of("carried_over"))
    total = trace.statistic("grad_norm_global").get("")
    if total is None or total.values.size < t.points:
        return None
    steps, values = total.steps[:t.points].astype(float), total.values[:t.points]
    if not np.isfinite(values).all() or values[0] <= 0:
        return None
    rising = float(np.mean(np.diff(values) > 0))
    growth = float(values[-1] / values[0])
    r2 = float(np.corrcoef(steps, values)[0, 1] ** 2)
    if growth < t.growth or rising < t.rising or r2 < t.linearity:
        return None
    return Finding(
        "gradients_not_zeroed", [], int(total.steps[0]),
        {"growth": round_sig(growth), "rising_fraction": round_sig(rising),
         "r_squared": round_sig(r2), "points": t.points, "threshold_growth": t.growth,
         "threshold_rising": t.rising, "threshold_linearity": t.linearity},
        f"the gradient norm grew steadily, {growth:.1f}x in {t.points} logged points, rising "
        f"at {rising:.0%} of them in a straight line: gradients add up from step to step",
        tags=trace.tags_of("grad_norm_global"))


RULES = (
    Rule("vanishing_gradient", Vanishing(), vanishing,
         "a residual connection, normalization (BatchNorm/LayerNorm), ReLU/GELU instead of "
         "sigmoid/tanh, or an initialization for the activation (kaiming for ReLU)"),
    Rule("exploding_gradient", Exploding(), exploding,
         "a smaller learning rate (try 10x smaller), gradient clipping "
         "(-p grad-clip:max_norm=1.0), or a learning-rate warm-up"),
    Rule("nonfinite", Nonfinite(), nonfinite,
         "look at the named layer's inputs and the loss: log/sqrt/division of values that can "
         "reach 0 (add an epsilon or use the fused loss, e.g. cross_entropy or "
         "BCEWithLogitsLoss), or a learning rate small enough not to overflow"),
    Rule("gradients_not_zeroed", NotZeroed(), not_zeroed,
         "call optimizer.zero_grad() once per step (before backward); with deliberate "
         "accumulation, step the optimizer and zero after every k batches"),
)
