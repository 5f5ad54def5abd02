"""Runs the workloads, prints medians/minimums and ratios, writes JSON.

Timing targets are never asserted here or in tests; ``--quick`` checks correctness only
(every contender computes the same losses) and is what the test suite runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Workload:
    """One benchmark: ``name`` says what it measures (printed beside the id, and accepted by
    ``--only``); ``module`` is the file of ``benchmarks/`` that runs it."""

    name: str
    module: str


WORKLOADS = {
    "W1": Workload("mlp-step", "mlp"),
    "W4": Workload("hooks", "mlp"),
    "W4b": Workload("histogram-30-bins", "watch"),
    "W4d": Workload("watch", "watch"),
    "W4e": Workload("histogram-every-100", "watch"),
    "W4f": Workload("histogram-every-step", "watch"),
    "W4g": Workload("torch-logging", "watch"),
    "W2": Workload("cnn-step", "cnn"),
    "W4c": Workload("default-plugins", "cnn"),
    "W3": Workload("dispatch", "dispatch"),
    "W5": Workload("scalars", "writer"),
    "W5b": Workload("histogram", "writer"),
    "W6": Workload("memory", "memory"),
    "W7": Workload("torch-watch", "torch_watch"),
    "W7c": Workload("torch-compiled", "torch_compiled"),
    "W8": Workload("data-parallel", "distributed"),
    "W9": Workload("doctor", "doctor"),
    "W10": Workload("lightning", "lightning"),
    "W11": Workload("hf-trainer", "huggingface"),
    "W12": Workload("accelerate", "huggingface"),
}
ON_DEVICE = {"torch_watch"}  # the workloads' modules that take --device
# Not run from here: "W5r remote-scalars", add_scalar throughput to an object store, needs the
# remote extra and moto's server (python benchmarks/remote.py).


def label(workload_id: str) -> str:
    """``"W7 torch-watch"``: the id and the name (an id without a name as it is)."""
    workload = WORKLOADS.get(workload_id)
    return f"{workload_id} {workload.name}" if workload else workload_id


def _resolve(wanted: str) -> str | None:
    """The id ``--only`` means by an id or a name, or None."""
    if wanted in WORKLOADS:
        return wanted
    return next((wid for wid, w in WORKLOADS.items() if w.name == wanted), None)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="few repetitions, correctness only")
    p.add_argument("--threads", type=int, default=1, help="BLAS/torch threads (default 1)")
    p.add_argument("--only", default="",
                   help="comma-separated workloads by id or name, e.g. W1,W3 or mlp-step")
    p.add_argument("--blocks", type=int, default=9, help="interleaved timing blocks")
    p.add_argument("--json", default="benchmarks/results.json", help="where to write JSON")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where W7 runs its PyTorch models (the other workloads run on the "
                        "CPU); cuda without CUDA says so and skips the row")
    p.add_argument("--system-malloc", action="store_true",
                   help="leave glibc's malloc thresholds alone (default: keep freed memory for "
                        "reuse, as gradlog train does, for every contender alike)")
    return p.parse_args(argv)


def _print(name: str, result: Any) -> None:
    print(f"\n== {label(name)}")
    if isinstance(result, dict):
        for k, v in result.items():
            if isinstance(v, float):
                print(f"  {k:<28} {v:.4g}")
            elif isinstance(v, tuple) and all(isinstance(b, float) for b in v):  # an interval
                print(f"  {k:<28} [" + ", ".join(f"{b:.4g}" for b in v) + "]")
            elif isinstance(v, dict) and any(isinstance(b, list) for b in v.values()):
                print(f"  {k:<28} (per block: in the --json file)")
            elif isinstance(v, dict):
                print(f"  {k}: " + ", ".join(f"{a}={b:.4g}" if isinstance(b, float) else
                                             f"{a}={b}" for a, b in v.items()))
            else:
                print(f"  {k:<28} {v}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    asked = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in asked if _resolve(w) is None]
    if unknown:
        print(f"unknown workload(s): {', '.join(unknown)}; known: "
              f"{', '.join(label(w) for w in WORKLOADS)}", file=sys.stderr)
        return 2
    wanted = [_resolve(w) for w in asked] or list(WORKLOADS)
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        pass
    if args.threads > 1:
        from .common import use_wall_clock
        use_wall_clock()
    if not args.system_malloc:
        from gradlog.utils.memory import reuse_freed_memory
        reuse_freed_memory()
    else:  # (for the processes W8 launches, which set their malloc up themselves)
        from .common import SYSTEM_MALLOC
        os.environ[SYSTEM_MALLOC] = "1"
    order = [w.module for w in WORKLOADS.values()]
    modules = sorted({WORKLOADS[w].module for w in wanted}, key=order.index)
    results: dict[str, Any] = {}
    for module in modules:
        start = time.perf_counter()
        if module == "writer":
            from . import writer
            raw = writer.main(["--quick"] if args.quick else [])
            targets = raw.get("targets", [])
            out = {"W5": {**raw["scalars"], "targets": [t for t in targets
                                                        if t["target"].startswith("scalars")]},
                   "W5b": {**raw["histogram"], "targets": [t for t in targets
                                                           if t["target"].startswith("hist")]},
                   "W5-image": raw["image"]}
        else:
            mod = __import__(f"benchmarks.{module}", fromlist=["run"])
            on_device = {"device": args.device} if module in ON_DEVICE else {}
            out = mod.run(quick=args.quick, blocks=args.blocks, **on_device)
        for name, value in out.items():
            if name in wanted or not any(w in out for w in wanted):
                results[name] = value
                _print(name, value)
        print(f"  ({module}: {time.perf_counter() - start:.1f} s)")
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "threads": args.threads, "quick": args.quick, "device": args.device,
            "malloc": "system" if args.system_malloc else "reuse freed memory"}
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=2, default=str)
    print(f"\nwrote {args.json}")
    return 0
