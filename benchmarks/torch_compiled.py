"""W7c: W7 with the model under ``torch.compile``: the compiled PyTorch MLP step (W1's shapes)
bare, and inside ``gl.watch`` with histogram + grad-norm at every=100 (the histogram's default
kinds), side by side in one run with W7's machinery: interleaved blocks of 100 steps (one
logging step each), three copies per contender, each ratio the median over rounds of a block's
time over the mean of its round's two bare contenders' blocks, wall-clock time with each
gradlog block ending with ``writer.flush()``. The target: histogram + grad-norm <= 1.05x the
compiled bare step.

Also reported, per contender: the graph breaks and the graphs compiled over its first 101
steps (two logging steps), counted by ``torch._dynamo.utils.counters`` from a reset compiler
cache. gradlog's logging steps run eagerly and the others run the compiled graph with no
gradlog hook in it, so both contenders should show one graph and no break.

The backend is inductor (it needs a C compiler) and aot_eager when inductor fails here;
``--quick`` uses aot_eager, checks that the watched run's losses match the bare run's (to
float32 rounding: its logging steps run eagerly) and times nothing.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from .common import Copies, check_close, cycler, interleaved_copies, torch_or_none
from .mlp import TorchMLP, make_batches, make_weights
from .torch_watch import COPIES, PER_BLOCK, PLUGINS, _over_bare, _paired

BACKENDS = ("inductor", "aot_eager")


class CompiledMLP(TorchMLP):
    """W1's MLP, its model compiled (``model`` is the compiled module the step calls)."""

    def __init__(self, weights: list, backend: str) -> None:
        super().__init__(weights)
        import torch
        self.model = torch.compile(self.model, backend=backend)


def _counted(steps: Any, calls: int) -> dict[str, int]:
    """Graph breaks and graphs compiled while ``steps()`` runs ``calls`` times, from an empty
    compiler cache."""
    import torch._dynamo
    counters = torch._dynamo.utils.counters
    torch._dynamo.reset()
    counters.clear()
    for _ in range(calls):
        steps()
    return {"graph_breaks": sum(counters["graph_break"].values()),
            "graphs": counters["stats"]["unique_graphs"]}


def _contender(weights: list, batches: list, backend: str, plugins: list | None,
               logdir: str, closers: list) -> Copies:
    import gradlog as gl
    steps, flushes = [], []
    for i in range(COPIES):
        model = CompiledMLP(weights, backend)
        steps.append(cycler(model, batches))
        if plugins is not None:
            watch = gl.watch(model.model, model.opt, logdir=os.path.join(logdir, str(i)),
                             plugins=plugins, graph=False)  # the plugins' cost, no tracing
            flushes.append(watch.writer.flush)
            closers.append(watch.close)
    return Copies(steps, flushes if plugins is not None else None)


def _backend(weights: list, batches: list) -> tuple[str, str]:
    """The first backend of BACKENDS that compiles and runs the step here, and why the
    others did not."""
    failed = ""
    for backend in BACKENDS:
        try:
            CompiledMLP(weights, backend).step(*batches[0])
            return backend, failed
        except Exception as exc:  # (inductor without a working C compiler, ...)
            failed += f"{backend}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}; "
    raise RuntimeError(f"W7c: no torch.compile backend works here ({failed})")


def run(quick: bool, blocks: int) -> dict[str, Any]:
    if torch_or_none() is None:
        return {"W7c": {"skipped": "torch is not installed"}}
    with tempfile.TemporaryDirectory(prefix="gradlog-w7c-", ignore_cleanup_errors=True) as logdir:
        return _run_in(logdir, quick, blocks)


def _quick(logdir: str, weights: list, batches: list) -> dict[str, Any]:
    import gradlog as gl
    bare_model = CompiledMLP(weights, "aot_eager")
    bare = [bare_model.step(x, y) for x, y in batches * 2]
    model = CompiledMLP(weights, "aot_eager")
    with gl.watch(model.model, model.opt, logdir=logdir, plugins=PLUGINS, graph=False):
        watched = [model.step(x, y) for x, y in batches * 2]
    check_close("W7c histogram+grad-norm", bare, watched, rtol=1e-5)
    return {"W7c": {"checked": {"compiled bare": bare}, "backend": "aot_eager"}}


def _run_in(logdir: str, quick: bool, blocks: int) -> dict[str, Any]:
    weights = make_weights()
    batches = make_batches(4 if quick else 16)
    if quick:
        return _quick(logdir, weights, batches)
    backend, failed = _backend(weights, batches)
    closers: list = []
    try:
        contenders = {
            "compiled bare": _contender(weights, batches, backend, None, logdir, closers),
            "compiled bare again": _contender(weights, batches, backend, None, logdir, closers),
            "compiled histogram+grad-norm": _contender(
                weights, batches, backend, PLUGINS, os.path.join(logdir, "watched"), closers)}
        compiled = {name: _counted(contenders[name], PER_BLOCK + 1)
                    for name in ("compiled bare", "compiled histogram+grad-norm")}
        t = interleaved_copies(contenders, blocks=blocks, per_block=PER_BLOCK)
    finally:
        for close in closers:
            close()
    samples = {k: np.array(v.samples) for k, v in t.items()}
    bare = {"bare": samples["compiled bare"], "bare again": samples["compiled bare again"]}
    ratio = _over_bare({**bare, "watched": samples["compiled histogram+grad-norm"]}, "watched")
    out: dict[str, Any] = {"backend": backend}
    if failed:
        out["backends that failed"] = failed
    out.update({f"{k}_s": v.median for k, v in t.items()})
    out["compiled bare again/compiled bare"] = _paired(bare["bare again"], bare["bare"])
    out["compiled histogram+grad-norm/compiled bare"] = ratio
    for name, counts in compiled.items():
        out[f"{name}: graph breaks, graphs (first {PER_BLOCK + 1} steps)"] = (
            f"{counts['graph_breaks']}, {counts['graphs']}")
    out["targets"] = {"compiled histogram+grad-norm/compiled bare <= 1.05": ratio <= 1.05}
    out["stat"] = "median over rounds of block / the round's bare blocks (wall clock)"
    out["block_seconds"] = {k: v.samples for k, v in t.items()}
    return {"W7c": out}
