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
from typing import Any

WORKLOADS = {
    "W1": "mlp", "W4": "mlp",
    "W4b": "watch", "W4d": "watch", "W4e": "watch", "W4f": "watch", "W4g": "watch",
    "W2": "cnn", "W4c": "cnn",
    "W3": "dispatch",
    "W5": "writer", "W5b": "writer",
    "W6": "memory",
    "W7": "torch_watch", "W7c": "torch_compiled",
    "W8": "distributed",
    "W9": "doctor",
    "W10": "lightning",
    "W11": "huggingface", "W12": "huggingface",  # hf-trainer, accelerate
}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="few repetitions, correctness only")
    p.add_argument("--threads", type=int, default=1, help="BLAS/torch threads (default 1)")
    p.add_argument("--only", default="", help="comma-separated workloads, e.g. W1,W3")
    p.add_argument("--blocks", type=int, default=9, help="interleaved timing blocks")
    p.add_argument("--json", default="benchmarks/results.json", help="where to write JSON")
    p.add_argument("--system-malloc", action="store_true",
                   help="leave glibc's malloc thresholds alone (default: keep freed memory for "
                        "reuse, as gradlog train does, for every contender alike)")
    return p.parse_args(argv)


def _print(name: str, result: Any) -> None:
    print(f"\n== {name}")
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
    wanted = [w.strip() for w in args.only.split(",") if w.strip()] or list(WORKLOADS)
    unknown = [w for w in wanted if w not in WORKLOADS]
    if unknown:
        print(f"unknown workload(s): {', '.join(unknown)}; known: {', '.join(WORKLOADS)}",
              file=sys.stderr)
        return 2
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
    modules = sorted({WORKLOADS[w] for w in wanted}, key=list(WORKLOADS.values()).index)
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
            out = mod.run(quick=args.quick, blocks=args.blocks)
        for name, value in out.items():
            if name in wanted or not any(w in out for w in wanted):
                results[name] = value
                _print(name, value)
        print(f"  ({module}: {time.perf_counter() - start:.1f} s)")
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "threads": args.threads, "quick": args.quick,
            "malloc": "system" if args.system_malloc else "reuse freed memory"}
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=2, default=str)
    print(f"\nwrote {args.json}")
    return 0
