"""Runs for the dashboard tests and a TensorBoard server to show them.

The logdir holds what users make: ``train``, a run of ``gradlog train`` (tiny: 256 images,
1 epoch, 4 steps; grad-norm, histogram and activation-stats at every step); ``watched``, a
user's own loop under ``gl.watch`` (grad-norm, and the update ratios that histogram writes as
one event a step: their order comes from the model text gl.watch logs);
``synthetic``, a ``SummaryWriter`` run with known vanishing, exploding and non-finite values;
``doctored``, a loop under ``gl.watch`` with the doctor, whose ``stem`` was left out of the
optimizer (the doctor finds it frozen); and ``loss-only``, a run without any of the
dashboard's tags.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from gradlog_plugins.activation_stats import activation_kind

import gradlog as gl
from gradlog import nn, optim
from gradlog.examples import BUILTIN
from gradlog.tensorboard import SummaryWriter

TRAIN_PLUGINS = ("grad-norm:every=1", "histogram:every=1", "activation-stats:every=1")
TINY = "[train]\ntrain_size = 256\nval_size = 64\ntwo_object_size = 8\n"
TRAIN_STEPS = 4
DOCTORED_STEPS = 6
WATCHED_RATIOS = 'histogram:every=1,kinds=["update_ratio"]'
WALL = 1_700_000_000.0
# synthetic: per layer, written in this order at each step (so "write order" is enc, mid.0,
# dec, while names sort dec, enc, mid.0)
SYNTHETIC = {
    "enc": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5],
    "mid.0": [0.5, 0.5, 100.0, math.nan, 0.6, 0.6],    # x200 at step 2, NaN at step 3
    "dec": [1e-9, 2e-9, 1e-9, 1e-9, 3e-9, 1e-9],      # below 1e-7 of the largest: vanishing
}


def gradlog_train(logdir: Path, config: Path) -> None:
    """``gradlog train`` in a child process, as a user runs it."""
    argv = [sys.executable, "-m", "gradlog.cli", "train", "--logdir", str(logdir),
            "--epochs", "1", "--config", str(config), "--no-default-plugins", "-q"]
    for plugin in TRAIN_PLUGINS:
        argv += ["-p", plugin]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


class Watched(nn.Module):
    """Module names whose alphabetical order (body, head, stem) is not the model's."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.body = nn.Sequential(nn.ReLU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(self.stem(x)))


def watched_run(logdir: Path) -> None:
    gl.manual_seed(0)
    model = Watched()
    opt = optim.SGD(model.parameters(), lr=0.1)
    with gl.watch(model, opt, logdir=str(logdir),
                  plugins=["grad-norm:every=1", WATCHED_RATIOS]):
        for _ in range(3):
            x, y = gl.randn(16, 4), gl.randint(0, 3, (16,))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()


def doctored_run(logdir: Path) -> None:
    """A layer left out of the optimizer: the doctor reports ``frozen_layer`` in ``stem``."""
    gl.manual_seed(0)
    model = Watched()
    opt = optim.SGD([*model.body.parameters(), *model.head.parameters()], lr=0.1)
    with gl.watch(model, opt, logdir=str(logdir),
                  plugins=["grad-norm:every=1", "doctor:every=1,check_every=1"]):
        for _ in range(DOCTORED_STEPS):
            x, y = gl.randn(16, 4), gl.randint(0, 3, (16,))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()


def synthetic_run(logdir: Path) -> None:
    with SummaryWriter(str(logdir)) as writer:
        for step in range(6):
            for i, (layer, values) in enumerate(SYNTHETIC.items()):
                writer.add_scalar(f"grad-norm/{layer}", values[step], step,
                                  walltime=WALL + step + i / 100)


def loss_only_run(logdir: Path) -> None:
    with SummaryWriter(str(logdir)) as writer:
        for step in range(3):
            writer.add_scalar("train/loss", 1.0 / (step + 1), step, walltime=WALL + step)


def make_logdir(root: Path) -> Path:
    runs = root / "runs"
    (root / "tiny.toml").write_text(TINY)
    gradlog_train(runs / "train", root / "tiny.toml")
    watched_run(runs / "watched")
    synthetic_run(runs / "synthetic")
    doctored_run(runs / "doctored")
    loss_only_run(runs / "loss-only")
    return runs


def example_model():
    """The model ``gradlog train`` trained, built again from the example itself."""
    config = tomllib.loads(TINY)["train"]
    return importlib.import_module(BUILTIN["shapes"]).build(config)["model"]


def expected_layers(metric: str) -> list[str]:
    """Each metric's layers in model order, as the plugins that log them choose them."""
    model = example_model()
    if metric == "grad_norm":
        return [name for name, m in model.named_modules()
                if next(iter(m.parameters(recurse=False)), None) is not None]
    if metric == "update_ratio":
        return [name for name, _ in model.named_parameters()]
    return [name for name, m in model.named_modules()
            if activation_kind(type(m).__name__)[0]]


class TensorBoard:
    """A ``tensorboard`` process on 127.0.0.1 and a free port, stopped by its pid."""

    def __init__(self, logdir: Path, load_fast: str, reload_interval: float = 0) -> None:
        argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
                "--host", "127.0.0.1", "--port", "0", f"--load_fast={load_fast}",
                "--reload_interval", str(reload_interval)]
        self.load_fast = load_fast
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
        self.output: list[str] = []
        self._started = threading.Event()
        self.url = None
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()
        if not self._started.wait(90):
            self.stop()
            raise AssertionError("TensorBoard did not start:\n" + "".join(self.output))

    def _read_output(self) -> None:
        for line in self.process.stderr:
            self.output.append(line)
            found = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
            if found and self.url is None:
                self.url = found.group(1)
                self._started.set()

    def get(self, route: str, **query):
        """The route's JSON, or ``(body, content type)`` for anything else."""
        url = self.url + route + ("?" + urllib.parse.urlencode(query) if query else "")
        with urllib.request.urlopen(url, timeout=30) as response:
            body = response.read()
            if response.headers.get_content_type() == "application/json":
                return json.loads(body)
            return body, response.headers.get_content_type()

    def error(self, route: str, **query) -> tuple[int, str]:
        """``(status, message)`` of a request that must fail."""
        try:
            self.get(route, **query)
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        raise AssertionError(f"{route} {query} did not fail")

    def wait_for(self, predicate, timeout: float = 60):
        """Poll until ``predicate()`` is truthy (the Rust loader loads in the background)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                result = predicate()
            except (OSError, ValueError, KeyError):
                result = None
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out on the load_fast={self.load_fast} server:\n"
                                     + "".join(self.output[-20:]))
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._drain.join(10)
        self.process.stderr.close()


def rust_loader_available() -> bool:
    try:
        import tensorboard_data_server
    except ImportError:
        return False
    binary = tensorboard_data_server.server_binary()
    return binary is not None and os.path.exists(binary)


LOADERS = [pytest.param("false", id="python-loader"),
           pytest.param("true", id="rust-loader", marks=pytest.mark.skipif(
               not rust_loader_available(), reason="no tensorboard_data_server binary"))]


def all_loaded(server: TensorBoard) -> bool:
    """Every run of the logdir is readable, to its last step."""
    runs = {r["run"]: r["tags"] for r in server.get("/data/plugin/gradient_flow/tags")["runs"]}
    if not {"train", "watched", "synthetic", "doctored", "loss-only"} <= set(runs):
        return False
    if "doctor/findings_json/text_summary" not in \
            server.get("/data/plugin/text/tags").get("doctored", []):
        return False
    last = server.get("/data/plugin/scalars/scalars", run="train", tag="train/loss")
    model = server.get("/data/plugin/text/tags").get("train", [])
    return len(last) == TRAIN_STEPS and "model/text_summary" in model \
        and len(runs["synthetic"]["grad_norm"]) == 3
