"""The heat map of one run and metric: a row per layer, a column per step (long runs grouped
into a bounded number of columns), and the layers whose values vanish or explode.

Pure functions over ``Point`` lists, so they are tested without a server.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import NamedTuple

VANISHING = 1e-7  # a layer below this fraction of the step's largest layer has vanished
JUMP = 100.0      # growing by more than this factor from one logged step to the next explodes


class Point(NamedTuple):
    step: int
    wall_time: float
    value: float


def column_ranges(steps: list[int], max_columns: int) -> list[tuple[int, int]]:
    """Sorted distinct ``steps`` as ``(first, last)`` ranges: one per step when they fit in
    ``max_columns``, else ``max_columns`` consecutive groups of (nearly) equal size."""
    count = len(steps)
    if count <= max_columns:
        return [(step, step) for step in steps]
    bounds = [count * i // max_columns for i in range(max_columns + 1)]
    return [(steps[bounds[i]], steps[bounds[i + 1] - 1]) for i in range(max_columns)]


def cell_value(values: list[float]) -> float:
    """What a cell holding several points shows: the largest, or a non-finite one, so that a
    spike never disappears in a downsampled column."""
    for value in values:
        if not math.isfinite(value):
            return value
    return max(values)


def write_times(series: dict[str, list[Point]]) -> dict[str, float]:
    """Each layer's wall time at the first step every layer has a point at (its first point's
    when there is no such step): the order the plugin wrote the layers in."""
    steps = [{p.step for p in points} for points in series.values() if points]
    common = set.intersection(*steps) if steps else set()
    first = min(common) if common else None
    times = {}
    for layer, points in series.items():
        at_first = [p.wall_time for p in points if p.step == first]
        if at_first or points:
            times[layer] = at_first[0] if at_first else points[0].wall_time
    return times


def heat_map(series: dict[str, list[Point]], order: list[str], max_columns: int) -> dict:
    """``steps`` / ``step_ends`` (each column's first and last step) and ``values`` (a row per
    layer of ``order``, None where the layer logged nothing in a column)."""
    steps = sorted({p.step for points in series.values() for p in points})
    ranges = column_ranges(steps, max_columns)
    starts = [first for first, _ in ranges]
    values = []
    for layer in order:
        cells: list[list[float]] = [[] for _ in ranges]
        for p in series[layer]:
            cells[bisect_right(starts, p.step) - 1].append(p.value)
        values.append([cell_value(c) if c else None for c in cells])
    return {"steps": starts, "step_ends": [last for _, last in ranges], "values": values,
            "downsampled": len(ranges) < len(steps)}


class Flag(NamedTuple):
    kind: str  # "vanishing" or "exploding"
    step: int
    value: float
    detail: str


def _largest_per_step(series: dict[str, list[Point]]) -> dict[int, float]:
    largest: dict[int, float] = {}
    for points in series.values():
        for p in points:
            if math.isfinite(p.value):
                largest[p.step] = max(largest.get(p.step, 0.0), abs(p.value))
    return largest


def find_flags(series: dict[str, list[Point]]) -> dict[str, list[Flag]]:
    """Per layer, every point where it vanished (below ``VANISHING`` times the largest layer's
    value at that step) or exploded (non-finite, or more than ``JUMP`` times its previous
    healthy value: coming back from a vanished value is a recovery, not an explosion)."""
    largest = _largest_per_step(series)
    found: dict[str, list[Flag]] = {}
    for layer, points in series.items():
        flags, healthy = [], None
        for p in points:
            top = largest.get(p.step, 0.0)
            if not math.isfinite(p.value):
                flags.append(Flag("exploding", p.step, p.value, f"{p.value} at step {p.step}"))
            elif top > 0 and abs(p.value) < VANISHING * top:
                flags.append(Flag("vanishing", p.step, p.value,
                                  f"{p.value:.3g} at step {p.step} (the largest layer: "
                                  f"{top:.3g})"))
            else:
                if healthy is not None and healthy.value > 0 \
                        and p.value > JUMP * healthy.value:
                    flags.append(Flag("exploding", p.step, p.value,
                                      f"x{p.value / healthy.value:.3g} from step "
                                      f"{healthy.step} to {p.step}"))
                healthy = p
        found[layer] = flags
    return found


def summarize(flags: list[Flag], steps: list[int]) -> tuple[list[dict], list[list]]:
    """Per kind: how often, first and last step, and the first occurrence in words; and the
    ``[column, kind]`` cells to mark (columns start at ``steps``), each once."""
    summary, marks = {}, {}
    for flag in flags:
        entry = summary.setdefault(flag.kind, {"kind": flag.kind, "count": 0,
                                               "first_step": flag.step, "detail": flag.detail})
        entry["count"] += 1
        entry["last_step"] = flag.step
        marks[(bisect_right(steps, flag.step) - 1, flag.kind)] = None
    return list(summary.values()), [list(mark) for mark in marks]
