"""Helpers shared by the workloads: interleaved timing, medians, minimums, ratios, and the
model wrapper both engines share."""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# CPU time of this process: on a shared machine it does not count the time spent waiting for
# a core, which wall time does. With more than one thread the wall clock is used instead.
TIMER = time.process_time

# Set (by run.py's --system-malloc) when the processes a workload launches are to leave glibc's
# malloc alone; otherwise they keep freed memory for reuse, as run.py's own process does.
SYSTEM_MALLOC = "GRADLOG_BENCH_SYSTEM_MALLOC"


@contextlib.contextmanager
def offline_wandb(directory: str) -> Iterator[None]:
    """wandb offline and quiet inside the block, writing only under ``directory`` (its runs,
    settings, cache, staging and artifacts): nothing goes to the network or outside the
    benchmark's temporary directory. The environment is as it was afterwards."""
    os.makedirs(directory, exist_ok=True)
    names = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONSOLE": "off",
             "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true", "WANDB_DIR": directory,
             **{f"WANDB_{kind.upper()}_DIR": os.path.join(directory, kind)
                for kind in ("config", "cache", "data", "artifact")}}
    before = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def use_wall_clock() -> None:
    global TIMER
    TIMER = time.perf_counter


def device_clock(torch: Any, device: str) -> Callable[[], float]:
    """The wall clock for steps on ``device``: on a GPU it first waits for the work queued
    there, so a block's time is the time its steps took, not the time to queue them."""
    if device == "cpu":
        return time.perf_counter

    def clock() -> float:
        torch.cuda.synchronize()
        return time.perf_counter()
    return clock


def device_missing(torch: Any, device: str) -> str | None:
    """Why ``device`` cannot run here (one line), or None when it can."""
    if device == "cuda" and not torch.cuda.is_available():
        return ("--device cuda: CUDA is not available here (torch.cuda.is_available() is "
                "False); run it on a machine with a GPU, or with --device cpu")
    return None


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def wandb_or_none() -> Any:
    """wandb, the anchor W4g, W7 and W10 measure against, or None where it is not installed."""
    try:
        import wandb
    except ImportError:
        return None
    return wandb


@dataclass
class Timing:
    """Per-step (or per-call) seconds of one contender over the interleaved blocks, by the
    run's clock (``samples``), in CPU time of the whole process (``cpu_samples``) and of the
    calling (training) thread alone (``thread_samples``: what another thread does is not in
    it, and neither is the time the machine's load takes from it)."""

    name: str
    samples: list[float] = field(default_factory=list)
    cpu_samples: list[float] = field(default_factory=list)
    thread_samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_samples)

    @property
    def thread_median(self) -> float:
        return statistics.median(self.thread_samples)


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of ``n`` contenders, one per round (a balanced Latin square, Williams' design):
    over the list each contender runs in every position equally often and right after every
    other contender equally often. (A rotation, A B C, B C A, ..., puts each one after the
    same neighbour every time, which then always pays for what that one leaves behind, such as
    wandb's service process still writing.)"""
    first, low, high = [0], 1, n - 1
    while low <= high:
        first.append(low)
        low += 1
        if low <= high:
            first.append(high)
            high -= 1
    rows = [[(k + shift) % n for k in first] for shift in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def interleaved(contenders: dict[str, Callable[[], Any]], *, blocks: int, per_block: int,
                warmup: int = 2, timer: Callable[[], float] | None = None,
                after_block: dict[str, Callable[[], Any]] | None = None) -> dict[str, Timing]:
    """Time each contender ``per_block`` calls at a time, in the rounds' orders of
    :func:`balanced_orders`, after warm-up.

    Interleaving spreads the machine's noise (a shared 2-core VM) over all contenders alike.
    ``timer`` replaces the module's clock; ``after_block[name]()`` runs inside a contender's
    timed block, after its calls (e.g. a flush: work another thread still owes is charged to
    the contender that made it).
    """
    clock = timer or TIMER
    finish = after_block or {}
    for name, fn in contenders.items():
        for _ in range(warmup):
            fn()
        if warmup and name in finish:
            finish[name]()
    timings = {name: Timing(name) for name in contenders}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        names = list(contenders)
        orders = balanced_orders(len(names))
        for block in range(blocks):
            # (whoever runs first after a collection pays for it: each does equally often)
            for name in (names[k] for k in orders[block % len(orders)]):
                fn = contenders[name]
                start, cpu_start, thread_start = clock(), time.process_time(), time.thread_time()
                for _ in range(per_block):
                    fn()
                if name in finish:
                    finish[name]()
                timings[name].samples.append((clock() - start) / per_block)
                timings[name].cpu_samples.append((time.process_time() - cpu_start) / per_block)
                timings[name].thread_samples.append((time.thread_time() - thread_start)
                                                    / per_block)
            gc.collect()
    finally:
        if gc_was:
            gc.enable()
    return timings


class EngineModel:
    """A model, optimizer and loss on an engine with PyTorch's API (gradlog or PyTorch itself):
    one training step reads the same for both, which is what the comparison relies on."""

    lib: Any
    model: Any
    opt: Any
    loss_fn: Any

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        lib = self.lib
        self.opt.zero_grad()
        loss = self.loss_fn(self.model(lib.from_numpy(x)), lib.from_numpy(y))
        loss.backward()
        self.opt.step()
        return float(loss.item())


class Copies:
    """One contender as several copies of itself, each timed for a block in turn (give
    ``end_block`` to ``interleaved`` as the contender's ``after_block``): identical bare
    models differ here by up to 2% in speed, from where their memory lies, and with one copy a
    contender is charged its copy's luck. ``flushes[i]`` (optional) ends copy i's block."""

    def __init__(self, steps: list[Callable[[], Any]],
                 flushes: list[Callable[[], Any]] | None = None) -> None:
        self.steps, self.flushes, self.current = steps, flushes, 0

    def __call__(self) -> Any:
        return self.steps[self.current]()

    def end_block(self) -> None:
        if self.flushes is not None:
            self.flushes[self.current]()
        self.current = (self.current + 1) % len(self.steps)

    def warm_up(self, calls: int) -> None:
        """Run every copy ``calls`` times, a block each."""
        for _ in self.steps:
            for _ in range(calls):
                self()
            self.end_block()


def interleaved_copies(contenders: dict[str, Copies], *, blocks: int, per_block: int,
                       timer: Callable[[], float] = time.perf_counter) -> dict[str, Timing]:
    """:func:`interleaved` for contenders of several copies, in wall-clock time (``timer``,
    e.g. :func:`device_clock`'s): every copy warmed up for a block (``interleaved``'s own
    warm-up would run only the current one), and each block ended by its copy's
    ``end_block``."""
    for copies in contenders.values():
        copies.warm_up(per_block)
    return interleaved(contenders, blocks=blocks, per_block=per_block, warmup=0,
                       timer=timer,
                       after_block={name: c.end_block for name, c in contenders.items()})


def bootstrap_interval(runs: list[dict[str, Any]],
                       statistic: Callable[[list[dict[str, np.ndarray]]], float], *,
                       resamples: int = 2000, level: float = 0.9,
                       seed: int = 0) -> tuple[float, float]:
    """How precisely one or more runs (each ``{contender: per-block times}``) measure
    ``statistic`` (a number computed from them, e.g. a ratio of medians): its ``level``
    interval over resamplings of each run's rounds with replacement, within the run. A round
    (one block of each contender, in :func:`interleaved`) is the unit resampled, so the
    contenders' blocks stay paired as they were timed."""
    names = [list(run) for run in runs]
    # (per run: contenders x rounds)
    samples = [np.array([run[n] for n in ns]) for run, ns in zip(runs, names)]
    rng = np.random.default_rng(seed)
    picks = [rng.integers(0, s.shape[1], (resamples, s.shape[1])) for s in samples]
    values = np.array([statistic([dict(zip(ns, s[:, p[k]]))
                                  for ns, s, p in zip(names, samples, picks)])
                       for k in range(resamples)])
    tail = (1.0 - level) / 2
    # (no interpolation: a resampling may give an infinite ratio)
    return (float(np.quantile(values, tail, method="lower")),
            float(np.quantile(values, 1.0 - tail, method="higher")))


def cycler(model: Any, batches: list) -> Callable[[], Any]:
    """A no-argument step function that feeds ``model.step`` the batches in turn."""
    state = {"i": 0}

    def step() -> Any:
        x, y = batches[state["i"] % len(batches)]
        state["i"] += 1
        return model.step(x, y)
    return step


def check_trajectories(label: str, floor: Any, mine: Any, torch_cls: Any, weights: Any,
                       batches: list, steps: int) -> dict[str, list[float]]:
    """Train the floor, gradlog and (when installed) PyTorch from the same weights on the same
    batches; their losses must agree before anything is timed."""
    def losses(cls: Any) -> list[float]:
        model = cls(weights)
        return [model.step(x, y) for x, y in batches[:steps]]
    out = {"floor": losses(floor), "gradlog": losses(mine)}
    check_close(f"{label} gradlog", out["floor"], out["gradlog"], 1e-4)
    if torch_or_none() is not None:
        out["torch"] = losses(torch_cls)
        check_close(f"{label} torch", out["floor"], out["torch"], 1e-4)
    return out


def check_close(name: str, reference: list[float], other: list[float], rtol: float) -> None:
    """Refuse to time contenders whose loss trajectories disagree."""
    for step, (a, b) in enumerate(zip(reference, other)):
        if abs(a - b) > rtol * max(abs(a), 1e-12):
            raise AssertionError(f"{name}: loss at step {step} is {b!r}, reference {a!r} "
                                 f"(relative tolerance {rtol})")


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:9.3f} ms"


def fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:9.3f} us"
