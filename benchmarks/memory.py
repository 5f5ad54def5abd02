"""W6: memory and import cost, each measured in a fresh child process.

* peak RSS of 200 steps of W1 and of W2: gradlog against the numpy floor (<= 1.3x);
* ``import gradlog``: resident memory and time (<= 50 MB, <= 0.5 s; TensorBoard is imported
  lazily);
* a 1,000-step training run (W1 at batch 16 inside ``gl.watch`` with two observer plugins,
  the loss logged to an event file every step): resident memory after warm-up must stay flat.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PEAK = r"""
import json, sys
sys.path.insert(0, {root!r})
from benchmarks import {module} as w
from gradlog.utils.memory import reuse_freed_memory
reuse_freed_memory()  # as gradlog train and the timing runs do, for both contenders
def peak_mb():  # VmHWM is per process image; ru_maxrss would include the parent's, via fork
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
weights = w.make_weights()
batches = w.make_batches(8)
model = w.{cls}(weights)
for i in range({steps}):
    x, y = batches[i % len(batches)]
    model.step(x, y)
print(json.dumps({{"peak_mb": peak_mb()}}))
"""

_IMPORT = r"""
import json, sys, time
sys.path.insert(0, {root!r})
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
before = rss_mb()
t = time.perf_counter()
import gradlog
took = time.perf_counter() - t
print(json.dumps({{"seconds": took, "rss_mb": rss_mb(), "rss_before_mb": before,
                  "tensorboard_imported": "tensorboard" in sys.modules}}))
"""

_FLAT = r"""
import json, os, sys, tempfile
sys.path.insert(0, {root!r})
from benchmarks import mlp
mlp.BATCH = 16
import gradlog as gl
from gradlog.utils.memory import reuse_freed_memory
reuse_freed_memory()  # as gradlog train does: freed blocks stay, so growth is not hidden
PAGE = os.sysconf("SC_PAGE_SIZE")
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20
weights = mlp.make_weights()
batches = mlp.make_batches(8)
model = mlp.GradlogMLP(weights)
samples = []
with tempfile.TemporaryDirectory() as logdir:
    # a whole training run: observers on the hooks and the loss in an event file every step
    with gl.watch(model.model, model.opt, logdir=logdir,
                  plugins=["grad-norm:every=1", "nan-guard"]) as run:
        for i in range({steps}):
            x, y = batches[i % len(batches)]
            run.log_scalar("train/loss", model.step(x, y))
            if i % 100 == 99:
                samples.append(rss_mb())
print(json.dumps({{"rss_mb_every_100_steps": samples}}))
"""


def _child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool, blocks: int) -> dict[str, Any]:
    steps = 5 if quick else 200
    result: dict[str, Any] = {}
    for name, module, floor_cls, cls in (("W1", "mlp", "FloorMLP", "GradlogMLP"),
                                         ("W2", "cnn", "FloorCNN", "GradlogCNN")):
        floor = _child(_PEAK.format(root=ROOT, module=module, cls=floor_cls, steps=steps))
        mine = _child(_PEAK.format(root=ROOT, module=module, cls=cls, steps=steps))
        result[f"{name}_peak_mb"] = {"floor": floor["peak_mb"], "gradlog": mine["peak_mb"],
                                     "gradlog/floor": mine["peak_mb"] / floor["peak_mb"],
                                     "target": "gradlog/floor <= 1.3",
                                     "met": mine["peak_mb"] / floor["peak_mb"] <= 1.3}
    imp = _child(_IMPORT.format(root=ROOT))
    imp["target"] = "rss <= 50 MB, <= 0.5 s, tensorboard not imported"
    imp["met"] = imp["rss_mb"] <= 50 and imp["seconds"] <= 0.5 and \
        not imp["tensorboard_imported"]
    result["import"] = imp
    flat = _child(_FLAT.format(root=ROOT, steps=300 if quick else 1000))
    samples = flat["rss_mb_every_100_steps"]
    after = samples[1:]  # warm-up: the first 200 steps
    growth = after[-1] - after[0]
    result["flat_rss"] = {"steps": 100 * len(samples), "samples_mb": samples,
                          "growth_after_warmup_mb": growth,
                          "spread_after_warmup_mb": max(after) - min(after),
                          "target": "growth after the first 200 steps <= 2 MB",
                          "met": growth <= 2.0}
    return result
