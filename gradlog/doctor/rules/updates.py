"""Rules over update-to-weight ratios ||dw||/||w||: too small, too large, or zero (frozen)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..findings import Finding
from ..trace import Series, Trace
from .base import Rule, per_layer_onsets, round_sig


def _weights(trace: Trace) -> dict[str, Series]:
    """Update ratios of weights. Biases are left out: they start at zero or near it, so their
    ratio says little (a ratio of 1 from a bias of 1e-4 is normal in the first steps)."""
    return {layer: s for layer, s in trace.statistic("update_ratio").items()
            if not layer.endswith("bias")}


def _finite_median(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else float("nan")


@dataclass(frozen=True)
class Small:
    below: float = 1e-5   # SageMaker Debugger WeightUpdateRatio's small_epsilon
    skip: int = 1         # first logged points ignored
    patience: int = 10


@dataclass(frozen=True)
class Large:
    above: float = 0.1    # 100x the 1e-3 that is healthy
    skip: int = 0
    patience: int = 3


def _ratio_finding(kind: str, trace: Trace, t, test, words: str) -> Finding | None:
    series = {layer: Series(s.steps[t.skip:], s.values[t.skip:])
              for layer, s in _weights(trace).items()}
    onsets = per_layer_onsets(series, lambda _l, s: test(s.values), t.patience)
    if not onsets:
        return None
    layers = sorted(onsets, key=lambda layer: (onsets[layer], layer))
    first = min(onsets.values())
    median = {layer: round_sig(_finite_median(series[layer].values)) for layer in layers}
    bound = t.below if kind == "small_update_ratio" else t.above
    return Finding(kind, layers, first,
                   {"median_ratio": median, "threshold": bound, "patience": t.patience},
                   f"each step changes {layers[0]} by {median[layers[0]]:.1e} of its size "
                   f"({words} {bound:g} for {t.patience} logged points in a row)",
                   tags=trace.tags_of("update_ratio"))


def small(trace: Trace, t: Small) -> Finding | None:
    return _ratio_finding("small_update_ratio", trace, t,
                          lambda v: (v > 0) & (v < t.below), "below")


def large(trace: Trace, t: Large) -> Finding | None:
    return _ratio_finding("large_update_ratio", trace, t,
                          lambda v: np.isfinite(v) & (v > t.above), "above")


@dataclass(frozen=True)
class Frozen:
    patience: int = 5           # logged points with gradients and no change
    min_relative: float = 1e-4  # a gradient norm (median) at least this fraction of the
    #                             largest module's: below, float32 rounding alone can hide
    #                             the update (that is a vanishing gradient)


def _module_of(parameter: str, modules) -> str | None:
    name = parameter
    while name not in modules:
        if "." not in name:
            return "" if "" in modules else None
        name = name.rpartition(".")[0]
    return name


def frozen(trace: Trace, t: Frozen) -> Finding | None:
    """Modules whose every parameter's update ratio is exactly 0 at every logged point while
    the module's gradient norm is positive at each: a layer left out of the optimizer (or
    with a learning rate of 0). One parameter alone at 0 is not enough: a weight whose input
    is all zeros (after a dead layer) has a zero gradient, and so no update, for that reason."""
    norms = trace.statistic("grad_norm")
    by_module: dict[str, list[Series]] = {}
    for parameter, s in trace.statistic("update_ratio").items():
        module = _module_of(parameter, norms)
        if module is not None:
            by_module.setdefault(module, []).append(s)
    medians = {module: float(np.median(g.values)) for module, g in norms.items()
               if np.isfinite(g.values).all()}
    floor = t.min_relative * max(medians.values(), default=0.0)
    onsets, evidence = {}, {}
    for module, series in by_module.items():
        steps = series[0].steps
        if steps.size < t.patience or any((s.values != 0).any() for s in series):
            continue
        g = norms[module]
        with_grad = g.values[np.isin(g.steps, steps)]
        if with_grad.size >= t.patience and (with_grad > 0).all() \
                and medians.get(module, 0.0) >= floor:
            onsets[module] = int(steps[0])
            evidence[module] = {"update_ratio": 0.0,
                                "grad_norm_median": round_sig(float(np.median(with_grad)))}
    for parameter, s in trace.statistic("missing_grad").items():  # never a gradient
        if s.values.size >= t.patience and (s.values == 1).all():
            onsets[parameter] = int(s.steps[0])
            evidence[parameter] = {"grad": None}
    if not onsets:
        return None
    layers = sorted(onsets, key=lambda layer: (onsets[layer], layer))
    still = [layer for layer in layers if "update_ratio" in evidence[layer]]
    unused = [layer for layer in layers if layer not in still]
    words = [f"{', '.join(still)} receive gradients but never change" if still else "",
             f"{', '.join(unused)} are in the optimizer but never receive a gradient"
             if unused else ""]
    return Finding("frozen_layer", layers, min(onsets.values()),
                   {"layers": evidence, "patience": t.patience},
                   "; ".join(w for w in words if w) + f" (at {t.patience}+ logged points)",
                   tags=trace.tags_of("update_ratio") + trace.tags_of("grad_norm"))


RULES = (
    Rule("small_update_ratio", Small(), small,
         "a larger learning rate (the ratio is about 1e-3 in healthy training), or check that "
         "weight decay or a scheduler has not driven it to ~0"),
    Rule("large_update_ratio", Large(), large,
         "a smaller learning rate (try 10x smaller) or a warm-up; with Adam, check eps and "
         "the parameters' scale"),
    Rule("frozen_layer", Frozen(), frozen,
         "pass every parameter to the optimizer (model.parameters()), check requires_grad, "
         "and that the layer is used in forward and connected to the loss"),
)
