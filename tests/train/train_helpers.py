"""Helpers for end-to-end runs of ``gradlog train``: tiny configurations, a test-only plugin
distribution (found through a ``.dist-info`` folder on PYTHONPATH, as pip would install it),
and reading runs back with TensorBoard's own loader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TINY = """
[train]
train_size = 256
val_size = 64
two_object_size = 8
"""

KILLER = '''
import os
import signal
from dataclasses import dataclass, field

from gradlog.plugin import Plugin, StopTraining


@dataclass
class Options:
    at_step: int = 3
    signal: str = "KILL"
    event: str = "on_batch_end"
    times: int = 1  # signals sent one right after the other


def _first_time() -> bool:
    """Whether the marker file is still to be made (then it is made now): a resumed run
    restores a plugin with the run's configuration, and then it does nothing."""
    marker = os.environ.get("GRADLOG_TEST_KILLED_MARKER")
    if marker is None or os.path.exists(marker):
        return False
    open(marker, "w").close()
    return True


class AtEvent(Plugin):
    """Acts at a chosen event and step (tests only), once per marker file; with at_step=-1
    at every call of the event."""

    def act(self):
        raise NotImplementedError

    def _maybe(self, run, event):
        o = self.options
        if event == o.event and (o.at_step == -1 or run.step == o.at_step and _first_time()):
            self.act()

    def on_batch_start(self, run, batch):
        self._maybe(run, "on_batch_start")

    def on_after_backward(self, run):
        self._maybe(run, "on_after_backward")

    def on_before_optimizer_step(self, run):
        self._maybe(run, "on_before_optimizer_step")

    def on_after_optimizer_step(self, run):
        self._maybe(run, "on_after_optimizer_step")

    def on_batch_end(self, run, metrics):
        self._maybe(run, "on_batch_end")

    def on_validation_end(self, run, metrics):
        self._maybe(run, "on_validation_end")

    def on_epoch_end(self, run):
        self._maybe(run, "on_epoch_end")


class Killer(AtEvent):
    """Sends a signal to its own process at a chosen event and step."""

    name = "killer"
    Options = Options

    def act(self):
        for _ in range(self.options.times):
            os.kill(os.getpid(), getattr(signal, "SIG" + self.options.signal))


@dataclass
class StopperOptions:
    event: str = "on_after_optimizer_step"
    at_step: int = 5  # -1: at every call of the event


class Stopper(AtEvent):
    """Raises StopTraining at a chosen event and step."""

    name = "stopper"
    Options = StopperOptions

    def act(self):
        raise StopTraining


class Farewell(Plugin):
    """Logs ``farewell`` (1.0) at the run's last step when it ends (tests only)."""

    name = "farewell"

    def on_train_end(self, run):
        run.log_scalar("farewell", 1.0, run.step)


class Explodes(Plugin):
    """A mutator that raises at a chosen step (tests only)."""

    name = "explodes"
    kind = "mutator"

    def on_before_optimizer_step(self, run):
        if run.step == 2:
            raise ZeroDivisionError("exploded on purpose")
'''


def gradlog_train(args: list[str], plugin_path: Path | None = None,
                  timeout: float = 300, killed_marker: Path | None = None
                  ) -> subprocess.CompletedProcess:
    """Run ``gradlog train ARGS`` in a child process (as a user would). The ``killer`` plugin
    fires only while ``killed_marker`` does not exist (it creates it as it fires)."""
    env = dict(os.environ)
    env.pop("GRADLOG_TEST_KILLED_MARKER", None)
    if killed_marker is not None:
        env["GRADLOG_TEST_KILLED_MARKER"] = str(killed_marker)
    if plugin_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_path),
                                                          env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "gradlog.cli", "train", *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


def scalars(run_dir: str, tag: str) -> list[tuple[int, float]]:
    """``(step, value)`` of ``tag`` as TensorBoard's loader sees the run (purge applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def hparams_sessions(run_dir: str) -> dict[str, list[int]]:
    """``{hparams tag: [steps]}`` of the run's own hparams summaries as TensorBoard's loader
    sees them (purge applied)."""
    from tensorboard.backend.event_processing.plugin_event_accumulator import (
        EventAccumulator,
    )
    acc = EventAccumulator(run_dir, size_guidance={"tensors": 0})
    acc.Reload()
    return {tag: [e.step for e in acc.Tensors(tag)]
            for tag in acc.PluginTagToContent("hparams")}
