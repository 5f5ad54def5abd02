"""Rules over the training and validation losses: no progress, and overfitting."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..findings import Finding
from ..trace import Trace
from .base import Rule, round_sig


@dataclass(frozen=True)
class NotDecreasing:
    decrease: float = 0.1  # the loss must fall by this fraction of its start ...
    within: int = 200      # ... within this many steps of its first point
    window: float = 0.1    # means over this fraction of those steps' points (one batch's
    #                        loss is noisy); in steps, so the logging cadence does not matter


def not_decreasing(trace: Trace, t: NotDecreasing) -> Finding | None:
    loss = trace.statistic("loss").get("")
    if loss is None or loss.steps[-1] - loss.steps[0] < t.within:
        return None
    first = loss.values[loss.steps < loss.steps[0] + t.within]
    if first.size < 10 or not np.isfinite(first).all():
        return None  # too few points to judge; non-finite losses are the nonfinite rule's
    width = max(1, int(round(t.window * first.size)))
    means = np.convolve(first, np.ones(width) / width, mode="valid")
    start, best = float(means[0]), float(np.min(means))
    if best <= start - t.decrease * abs(start):
        return None
    return Finding(
        "loss_not_decreasing", [], int(loss.steps[0]),
        {"loss_start": round_sig(start), "loss_best": round_sig(best),
         "required_decrease": t.decrease, "within_steps": t.within, "window_points": width},
        f"in its first {t.within} steps the loss went from {start:.4g} to at best {best:.4g} "
        f"(means of {width} points), less than a {t.decrease:.0%} decrease",
        tags=trace.tags_of("loss"))


@dataclass(frozen=True)
class Overfitting:
    rise: float = 0.1    # validation loss this fraction above its lowest so far ...
    patience: int = 5    # ... at this many validation points in a row ...
    # ... while the training loss there is below its value at the lowest validation point


def overfitting(trace: Trace, t: Overfitting) -> Finding | None:
    """Read point by point, as the live doctor sees the run grow: the same answer for a
    finished run as for the run when it first showed."""
    val = trace.statistic("val_loss").get("")
    train = trace.statistic("loss").get("")
    if val is None or train is None:
        return None

    def train_near(step: int) -> float:  # the mean training loss of the last points to step
        upto = train.values[train.steps <= step][-10:]
        return float(np.mean(upto)) if upto.size else np.nan

    low, run = None, 0
    for i, value in enumerate(val.values.tolist()):
        if not np.isfinite(value):
            return None  # the nonfinite rule's
        if low is None or value < val.values[low]:
            low, run = i, 0
            continue
        rising = value > (1 + t.rise) * val.values[low] and \
            train_near(int(val.steps[i])) < train_near(int(val.steps[low]))
        run = run + 1 if rising else 0
        if run >= t.patience:
            break
    else:
        return None
    low_step, now_step = int(val.steps[low]), int(val.steps[i])
    lowest = float(val.values[low])
    return Finding(
        "overfitting", [], low_step,
        {"val_loss_lowest": round_sig(lowest), "val_loss_now": round_sig(value),
         "train_loss_at_lowest": round_sig(train_near(low_step)),
         "train_loss_now": round_sig(train_near(now_step)), "rise": t.rise,
         "patience": t.patience},
        f"the validation loss was lowest at step {low_step} ({lowest:.4g}) and has stayed "
        f"more than {t.rise:.0%} above it since, while the training loss went on falling",
        tags=trace.tags_of("val_loss") + trace.tags_of("loss"))


RULES = (
    Rule("loss_not_decreasing", NotDecreasing(), not_decreasing,
         "check that labels match inputs and the loss suits the targets, try a learning rate "
         "10x larger or smaller, and overfit one small batch first"),
    Rule("overfitting", Overfitting(), overfitting,
         "more data or augmentation, weight decay or dropout, a smaller model, or stop at the "
         "step of the lowest validation loss"),
)
