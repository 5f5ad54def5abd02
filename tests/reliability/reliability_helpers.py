"""Helpers for the reliability tests: the test-only plugin distribution (``crash-at``, which
signals its own process at a chosen event, and ``faulty``, which misbehaves on purpose), runs of
``gradlog train`` under the crash driver, and strict readers of what a run left on disk."""

from __future__ import annotations

import json
import os
import pathlib
import struct
import subprocess
import sys

import google_crc32c

from gradlog.testing import plugin_distribution

HERE = pathlib.Path(__file__).resolve().parent
DRIVER = HERE / "crash_driver.py"

TINY = """
[train]
train_size = 256
val_size = 64
two_object_size = 8
"""
STEPS = 8  # 256 images / batch 64 = 4 steps per epoch, 2 epochs
SCALAR_TAGS = ("train/loss", "train/acc", "train/lr", "val/loss", "val/acc")

# Every built-in plugin, at cadences that log each kind of tag (scalars, histograms, images,
# text, add_scalars runs) at several steps of the tiny run, epoch ends included.
BUILTIN_PLUGINS = (
    "nan-guard", "grad-clip:max_norm=0.5", "grad-noise:eta=0.001",
    "adversarial:mode=fgsm,eval_size=16,log_every=1", "histogram:every=3,bins=20",
    "grad-norm:every=1",
    "gradcam:every=3,num_images=2", "lr-monitor", "activation-stats:every=3",
)

PLUGINS = r'''
import json
import math
import os
import signal
from dataclasses import dataclass

from gradlog.plugin import Plugin


def _signal(name, **where):
    log = os.environ.get("GRADLOG_RELIABILITY_SIDELOG")
    if log:  # tell the test where the signal was sent (fsynced: SIGKILL follows at once)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, (json.dumps({"kill": "plugin", "signal": name, **where}) + "\n").encode())
        os.fsync(fd)
        os.close(fd)
    os.kill(os.getpid(), getattr(signal, "SIG" + name))


class CrashAt(Plugin):
    """Signals its own process at the event, step and epoch that the environment variable
    GRADLOG_RELIABILITY_CRASH names ("event=on_batch_end,step=3,epoch=-1,signal=KILL"; -1:
    any), and does nothing without it: a resumed run restores the plugin with the run's
    configuration, and only the process the test means to stop has the variable. The event
    "validation" is a forward hook on the model that fires during validation."""

    name = "crash-at"

    def setup(self, run):
        self.run = run
        spec = os.environ.get("GRADLOG_RELIABILITY_CRASH", "")
        self.where = dict(part.split("=") for part in spec.split(",")) if spec else None
        if self.where and self.where["event"] == "validation":
            run.hooks.register_forward_hook(run.model, self._forward)

    def _forward(self, module, args, output):
        if self.run.phase == "validation":
            self._maybe("validation", self.run)

    def _maybe(self, event, run):
        w = self.where
        if (w and event == w["event"] and int(w.get("step", -1)) in (-1, run.step)
                and int(w.get("epoch", -1)) in (-1, run.epoch)):
            self.where = None  # once
            _signal(w.get("signal", "KILL"), event=event, step=run.step, epoch=run.epoch)


def _event(name):
    def method(self, run):
        self._maybe(name, run)
    method.__name__ = name
    return method


for _name in ("on_train_start", "on_epoch_start", "on_after_backward",
              "on_before_optimizer_step", "on_after_optimizer_step", "on_epoch_end",
              "on_train_end"):
    setattr(CrashAt, _name, _event(_name))
CrashAt.on_batch_start = lambda self, run, batch: self._maybe("on_batch_start", run)
CrashAt.on_batch_end = lambda self, run, metrics: self._maybe("on_batch_end", run)
CrashAt.on_validation_end = lambda self, run, metrics: self._maybe("on_validation_end", run)


class SubRuns(Plugin):
    """Logs add_scalars runs (tests only): a pair per step, and the validation loss at each
    epoch end, so every add_scalars run has a point at a checkpoint's step from before it."""

    name = "sub-runs"

    def on_batch_end(self, run, metrics):
        loss = metrics["train/loss"]
        run.writer.add_scalars("pair", {"up": loss, "down": -loss}, run.step)

    def on_validation_end(self, run, metrics):
        run.writer.add_scalars("val_pair", {"loss": metrics["val/loss"]}, run.step)


@dataclass
class FaultOptions:
    where: str = "on_batch_end"   # an event, a hook kind, or "setup"
    fault: str = "raise"          # raise | return-value | wrong-shape | wrong-dtype | nan
                                  # | inf | register-more | remove-self | signal-int
    at_step: int = 1              # first step at which the fault happens
    times: int = 1000             # how many times in a row


class Faulty(Plugin):
    """Misbehaves on purpose at a chosen place (tests only); its kind is chosen by name:
    "faulty" is an observer, "faulty-mutator" a mutator."""

    name = "faulty"
    Options = FaultOptions

    def setup(self, run):
        self.run, self.calls, self.faults, self.handles = run, 0, 0, []
        o, h, m = self.options, run.hooks, run.model
        first = next(p for p in m.parameters())
        registrations = {
            "tensor hook": lambda: h.register_hook(first, self._hook),
            "post-accumulate-grad hook": lambda: h.register_post_accumulate_grad_hook(
                first, self._hook),
            "forward pre-hook": lambda: h.register_forward_pre_hook(m, self._hook),
            "forward hook": lambda: h.register_forward_hook(m, self._hook),
            "backward pre-hook": lambda: h.register_full_backward_pre_hook(m, self._hook),
            "backward hook": lambda: h.register_full_backward_hook(m, self._hook),
            "optimizer step pre-hook": lambda: h.register_step_pre_hook(self._hook),
            "optimizer step post-hook": lambda: h.register_step_post_hook(self._hook),
        }
        if o.where in registrations:
            self.handles.append(registrations[o.where]())
        if o.where == "setup":
            self._fault("setup", ())

    def _due(self):
        return self.run.phase == "train" and self.run.step >= self.options.at_step and \
            self.faults < self.options.times

    def _hook(self, *args):
        self.calls += 1
        if self._due():
            return self._fault(self.options.where, args)
        return None

    def _fault(self, where, args):
        self.faults += 1
        fault = self.options.fault
        if fault == "raise":
            raise ZeroDivisionError(f"fault injected in {where} at step {self.run.step}")
        if fault == "return-value":
            return {"unexpected": "value"}
        if fault in ("wrong-shape", "wrong-dtype", "nan", "inf"):
            value = args[-1] if args else None
            if isinstance(value, tuple):
                value = value[0]
            if value is None or not hasattr(value, "shape"):
                return float("nan")
            import gradlog as gl
            if fault == "wrong-shape":
                return gl.zeros(*value.shape, 2, dtype=value.dtype)
            if fault == "wrong-dtype":
                return gl.zeros(*value.shape, dtype=gl.int64)
            return gl.full(value.shape, math.nan if fault == "nan" else math.inf,
                           dtype=value.dtype)
        if fault == "register-more":
            m = self.run.model
            self.handles.append(self.run.hooks.register_forward_hook(m, self._extra))
            return None
        if fault == "remove-self":
            for handle in self.handles:
                self.run.hooks.remove(handle)
            self.handles = []
            return None
        if fault == "signal-int":
            _signal("INT", event=where, step=self.run.step)
            return None
        raise ValueError(f"unknown fault {fault}")

    def _extra(self, module, args, output):
        self.calls += 1
        return None

    def state_dict(self):
        return {"faults": self.faults}


class FaultyMutator(Faulty):
    name = "faulty-mutator"
    kind = "mutator"


def _fault_event(name):
    def method(self, run, **kwargs):
        if self.options.where == name:
            self.calls += 1
            if self._due():
                args = tuple(kwargs.values())
                return self._fault(name, args)
        return None
    method.__name__ = name
    return method


for _name in ("on_train_start", "on_epoch_start", "on_batch_start", "on_after_backward",
              "on_before_optimizer_step", "on_after_optimizer_step", "on_batch_end",
              "on_validation_end", "on_epoch_end", "on_train_end"):
    setattr(Faulty, _name, _fault_event(_name))
'''


def make_plugin_dist(root: pathlib.Path) -> pathlib.Path:
    """A directory to put on PYTHONPATH: the plugins and their dist-info with entry points,
    as pip would install them."""
    return plugin_distribution(
        root, "gradlog-reliability-plugins", {"gradlog_reliability_plugins": PLUGINS},
        {name: f"gradlog_reliability_plugins:{cls}" for name, cls in (
            ("crash-at", "CrashAt"), ("sub-runs", "SubRuns"), ("faulty", "Faulty"),
            ("faulty-mutator", "FaultyMutator"))})


def child_env(plugin_path: pathlib.Path | None) -> dict:
    env = dict(os.environ)
    if plugin_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_path),
                                                          env.get("PYTHONPATH")]))
    return env


def train_args(config: str, *extra: str) -> list[str]:
    return ["--no-default-plugins", "--epochs", "2", "--config", config, "--quiet", *extra]


def all_plugins_args(config: str, *extra: str) -> list[str]:
    """``train_args`` with every built-in plugin, ``sub-runs`` and ``crash-at`` enabled."""
    plugins = [a for spec in ("crash-at", "sub-runs", *BUILTIN_PLUGINS) for a in ("-p", spec)]
    return train_args(config, *plugins, *extra)


def run_driver(spec: dict, args: list[str], plugin_path: pathlib.Path | None,
               timeout: float = 300, crash: str | None = None) -> subprocess.CompletedProcess:
    """``gradlog train ARGS`` under the crash driver (``spec``: see crash_driver.py); the
    plugins write where they signalled to the same side log. ``crash``: where the crash-at
    plugin signals this process (see CrashAt)."""
    env = child_env(plugin_path)
    env.pop("GRADLOG_RELIABILITY_CRASH", None)
    if crash:
        env["GRADLOG_RELIABILITY_CRASH"] = crash
    env["GRADLOG_RELIABILITY_SIDELOG"] = str(spec["sidelog"])
    return subprocess.run([sys.executable, str(DRIVER), json.dumps(spec), *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


def gradlog_train(args: list[str], plugin_path: pathlib.Path | None = None,
                  timeout: float = 300) -> subprocess.CompletedProcess:
    """``gradlog train ARGS`` in a child process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "gradlog.cli", "train", *args],
                          capture_output=True, text=True, env=child_env(plugin_path),
                          timeout=timeout)


def read_side_log(path) -> list[dict]:
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line]


# -- reading runs back -------------------------------------------------------------------------

def event_files(run_dir) -> list[str]:
    names = sorted(n for n in os.listdir(run_dir) if "tfevents" in n)
    return [os.path.join(run_dir, n) for n in names]


def _masked(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def strict_records(path) -> tuple[list[bytes], int]:
    """``(payloads, torn)``: every record's CRCs are checked (a mismatch fails the test); only
    the last record may be incomplete, and ``torn`` is how many bytes of it there are."""
    data = pathlib.Path(path).read_bytes()
    payloads, offset = [], 0
    while offset < len(data):
        rest = len(data) - offset
        if rest < 12:
            return payloads, rest
        (length,) = struct.unpack_from("<Q", data, offset)
        (length_crc,) = struct.unpack_from("<I", data, offset + 8)
        assert length_crc == _masked(data[offset:offset + 8]), f"{path}: bad length CRC"
        if rest < 12 + length + 4:
            return payloads, rest
        payload = data[offset + 12:offset + 12 + length]
        (crc,) = struct.unpack_from("<I", data, offset + 12 + length)
        assert crc == _masked(payload), f"{path}: bad payload CRC at byte {offset}"
        payloads.append(payload)
        offset += 12 + length + 4
    return payloads, 0


def loader_entries(path) -> set[tuple]:
    """``(tag, step, value)`` of every summary value TensorBoard's record-level loader reads
    from one event file (``EventFileLoader``: it must not raise)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    out = set()
    for event in EventFileLoader(path).Load():
        for v in event.summary.value:
            value = v.simple_value if v.WhichOneof("value") == "simple_value" else None
            if v.HasField("tensor") and v.metadata.plugin_data.plugin_name == "scalars":
                from tensorboard.util import tensor_util
                value = float(tensor_util.make_ndarray(v.tensor))
            out.add((v.tag, event.step, value))
    return out


def accumulated(run_dir) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of every scalar as TensorBoard shows the run (purges
    applied), in order, duplicates kept. Read with the classic ``EventAccumulator`` and checked
    against the one TensorBoard's server uses (``plugin_event_accumulator``)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    found = {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
             for tag in acc.Tags()["scalars"]}
    server = _server_accumulator(run_dir)
    served = {tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                    for e in server.Tensors(tag)]
              for tag in server.Tags()["tensors"]
              if server.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"}
    assert _same(served, found), (served, found)
    return found


def _same(a: dict, b: dict) -> bool:
    """Equal, NaN equal to NaN."""
    def key(points):
        return [(s, "nan" if v != v else v) for s, v in points]
    return a.keys() == b.keys() and all(key(a[t]) == key(b[t]) for t in a)


def _server_accumulator(run_dir):
    from tensorboard.backend.event_processing import plugin_event_accumulator
    acc = plugin_event_accumulator.EventAccumulator(str(run_dir),
                                                    size_guidance={"tensors": 0})
    acc.Reload()
    return acc


# values that differ from run to run
TIMING = ("train/steps_per_sec", "/ms_per_step", "/queue_waits", "_hparams_/")


def every_tag(run_dir) -> dict[tuple[str, str], list[tuple[int, object]]]:
    """``{(run, tag): [(step, value), ...]}`` of every tag of ``run_dir`` and of each run below
    it (add_scalars runs), as TensorBoard's server reads them with its Python
    loader (purges applied, duplicates kept), each value as comparable data (a scalar's float,
    an image's PNG bytes, a histogram's buckets, a text), None for timings. (``accumulated``
    checks the classic ``EventAccumulator`` against it for the scalars.)"""
    from tensorboard.util import tensor_util
    found = {}
    for root, dirs, _ in os.walk(run_dir):
        dirs.sort()
        if not event_files(root):
            continue
        run = os.path.relpath(root, run_dir)
        server = _server_accumulator(root)
        for tag in server.Tags()["tensors"]:
            events = server.Tensors(tag)
            if any(t in tag for t in TIMING):
                values = [None] * len(events)
            else:
                values = [tensor_util.make_ndarray(e.tensor_proto).tolist() for e in events]
            found[(run, tag)] = list(zip([e.step for e in events], values))
    return found


def text_steps(run_dir, tag: str) -> list[int]:
    """Steps of a text summary (``tag`` as logged), as TensorBoard's server sees the run."""
    acc = _server_accumulator(run_dir)
    name = f"{tag}/text_summary"
    return [e.step for e in acc.Tensors(name)] if name in acc.Tags()["tensors"] else []


# -- a tiny model and a user's loop for gl.watch ---------------------------------------------

def setup_model(seed: int = 0):
    """8 -> 16 -> 3 (``fc1``, ``fc2``) with SGD and momentum."""
    import gradlog as gl
    from gradlog import nn, optim

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 3)

        def forward(self, x):
            return self.fc2(self.fc1(x).relu())

    gl.manual_seed(seed)
    model = Net()
    return model, optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def make_batches(n: int = 6, seed: int = 0) -> list:
    import numpy as np

    import gradlog as gl
    rng = np.random.default_rng(seed)
    return [(gl.tensor(rng.standard_normal((4, 8)).astype(np.float32)),
             gl.tensor(rng.integers(0, 3, 4))) for _ in range(n)]


def user_loop(run, model, opt, batches) -> list[float]:
    """A user's own loop inside gl.watch."""
    from gradlog.nn import functional as F
    losses = []
    for x, y in batches:
        x, y = run.batch(x, y)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        run.log_scalar("train/loss", loss)
        losses.append(float(loss.item()))
    return losses
