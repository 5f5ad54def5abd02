"""Each rule on hand-made traces: it fires exactly past its threshold and patience, with the
layers and first step the numbers say, and its thresholds can be overridden."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gradlog.doctor import RULES, Trace, diagnose, rules_with


def trace_of(series: dict[str, list[float]]) -> Trace:
    """``{tag: values}``, each at steps 0, 1, 2, ..."""
    trace = Trace()
    for tag, values in series.items():
        for step, value in enumerate(values):
            trace.add_scalar(tag, step, value)
    return trace


def kinds(trace, rules=None):
    return {f.kind: f for f in diagnose(trace, rules)}


def test_vanishing_needs_the_ratio_for_patience_points():
    small = [1.0] * 3 + [0.9e-4] * 5
    found = kinds(trace_of({"grad-norm/a": small, "grad-norm/b": [1.0] * 8}))
    assert found["vanishing_gradient"].layers == ["a"]
    assert found["vanishing_gradient"].first_step == 3
    assert "vanishing_gradient" not in kinds(trace_of({"grad-norm/a": [1.0] * 3 + [0.9e-4] * 4,
                                                         "grad-norm/b": [1.0] * 7}))
    assert "vanishing_gradient" not in kinds(trace_of({"grad-norm/a": [1.1e-4] * 8,
                                                         "grad-norm/b": [1.0] * 8}))


def test_exploding_from_the_smallest_early_norm():
    norms = [1.0, 2.0, 1.5, 1.0, 1.2, 50.0, 101.0, 150.0, 200.0, 1.0]
    found = kinds(trace_of({"grad-norm/global": norms, "grad-norm/fc": norms,
                              "grad-norm/conv": [1.0] * 10}))["exploding_gradient"]
    assert (found.first_step, found.layers) == (6, ["fc"])
    assert found.evidence["baseline"] == 1.0
    spike = [1.0] * 5 + [500.0, 500.0, 1.0, 1.0]  # two points only: a spike that recovers
    assert "exploding_gradient" not in kinds(trace_of({"grad-norm/global": spike}))


def test_nonfinite_names_the_first_step_and_the_layers_nonfinite_there():
    nan = math.nan
    found = kinds(trace_of({"train/loss": [1.0, 1.0, 1.0, nan],
                              "grad-norm/a": [1.0, 1.0, nan, nan],
                              "grad-norm/b": [1.0, 1.0, 1.0, nan]}))["nonfinite"]
    assert (found.first_step, found.layers) == (2, ["a"])


def test_nonfinite_prefers_the_live_doctors_origin():
    trace = trace_of({"train/loss": [1.0, math.inf]})
    trace.add_text("doctor/nonfinite", 1, '{"layers": ["fc2"], "evidence": {"where": '
                   '"forward"}, "message": "fc2 output went non-finite"}')
    found = kinds(trace)["nonfinite"]
    assert (found.first_step, found.layers, found.evidence) == (1, ["fc2"],
                                                                {"where": "forward"})


def test_update_ratio_rules_leave_biases_and_zeros_out():
    ratios = {"histogram/update_ratio/fc.weight": [1e-3, 5e-6] + [5e-6] * 10,
              "histogram/update_ratio/fc.bias": [1e-7] * 12,
              "histogram/update_ratio/out.weight": [0.2, 0.3, 0.2, 1e-3] + [1e-3] * 8}
    found = kinds(trace_of(ratios))
    assert (found["small_update_ratio"].layers, found["small_update_ratio"].first_step) == \
        (["fc.weight"], 1)
    assert (found["large_update_ratio"].layers, found["large_update_ratio"].first_step) == \
        (["out.weight"], 0)


def test_frozen_layer_needs_every_parameter_still_and_a_real_gradient():
    still = [0.0] * 6
    found = kinds(trace_of({"histogram/update_ratio/a.weight": still,
                              "histogram/update_ratio/a.bias": still,
                              "histogram/update_ratio/b.weight": still,
                              "histogram/update_ratio/b.bias": [1e-3] * 6,
                              "grad-norm/a": [1.0] * 6, "grad-norm/b": [1.0] * 6}))
    assert found["frozen_layer"].layers == ["a"]


def test_dead_and_saturated_need_more_than_half_for_patience_points():
    trace = trace_of({"activation-stats/relu/dead_fraction":
                        [0.1, 0.6, 0.6, 0.6, 0.6, 0.6],
                        "activation-stats/act/dead_fraction": [0.5] * 6,
                        "activation-stats/tanh/saturated_fraction":
                        [0.9] * 4})
    found = kinds(trace)
    assert (found["dead_units"].layers, found["dead_units"].first_step) == (["relu"], 1)
    assert "saturated_activation" not in found


def test_poor_initialization_compares_the_first_step_spread():
    stds = {"activation-stats/a/std": [1.0, 1.0], "activation-stats/b/std": [0.009, 1.0],
            "activation-stats/dead/std": [0.0, 0.0]}
    found = kinds(trace_of(stds))
    assert found["poor_initialization"].layers == ["a", "b"]
    stds["activation-stats/b/std"] = [0.011, 1.0]
    assert "poor_initialization" not in kinds(
        trace_of(stds))


def test_loss_not_decreasing_and_a_noisy_decreasing_loss():
    rng = np.random.default_rng(0)
    flat = (1.0 + 0.05 * rng.standard_normal(220)).tolist()
    assert kinds(trace_of({"train/loss": flat}))["loss_not_decreasing"].first_step == 0
    falling = (np.linspace(1.0, 0.6, 220) + 0.3 * rng.standard_normal(220)).tolist()
    assert "loss_not_decreasing" not in kinds(trace_of({"train/loss": falling}))


def test_overfitting_from_the_lowest_validation_loss_while_training_improves():
    trace = Trace()
    for step in range(100):
        trace.add_scalar("train/loss", step, 1.0 - step / 200)
    for step, v in zip(range(0, 100, 10), [1.0, 0.8, 0.7, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 0.5]):
        trace.add_scalar("val/loss", step, v)
    found = kinds(trace)["overfitting"]  # a later, lower minimum does not undo it
    assert found.first_step == 30 and found.evidence["val_loss_lowest"] == 0.6
    assert found.evidence["val_loss_now"] == 1.0
    bump = Trace(scalars={**trace.scalars, "val/loss": {0: 1.0, 10: 0.6, 20: 0.7, 30: 0.7,
                                                        40: 0.7, 50: 0.7, 60: 0.6}})
    assert "overfitting" not in kinds(bump)  # four points above: patience is five
    flat_train = Trace(scalars={**trace.scalars, "train/loss": {s: 1.0 for s in range(100)}})
    assert "overfitting" not in kinds(flat_train)


def test_gradients_not_zeroed_is_steady_linear_growth():
    found = kinds(trace_of({"grad-norm/global": [1.0 + 0.5 * s for s in range(20)]}))
    assert found["gradients_not_zeroed"].first_step == 0
    noisy = [1.0 + 0.5 * s + (3.0 if s % 2 else 0.0) for s in range(20)]
    assert "gradients_not_zeroed" not in kinds(trace_of({"grad-norm/global": noisy}))


def test_thresholds_can_be_overridden_and_bad_overrides_are_refused():
    trace = trace_of({"grad-norm/a": [1e-3] * 8, "grad-norm/b": [1.0] * 8})
    assert "vanishing_gradient" not in kinds(trace)
    rules = rules_with({"vanishing_gradient": {"relative": 1e-2}})
    assert "vanishing_gradient" in kinds(trace, rules)
    assert RULES["vanishing_gradient"].thresholds.relative == 1e-4  # the default unchanged
    with pytest.raises(ValueError, match="no threshold 'ratio'; accepted: relative, patience"):
        rules_with({"vanishing_gradient": {"ratio": 1}})
    with pytest.raises(ValueError, match="no doctor rule 'vanishing'"):
        rules_with({"vanishing": {}})
    with pytest.raises(ValueError, match="must be a number"):
        rules_with({"vanishing_gradient": {"relative": "1e-2"}})
