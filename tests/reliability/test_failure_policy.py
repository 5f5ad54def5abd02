"""The failure policy's counting under ``gl.watch`` (tests/plugin_framework/test_isolation.py
covers each hook kind failing alone): "consecutive" is per event or hook kind, so a hook that
fails at every step is disabled even when the plugin's events succeed in between, and failures
of one hook that are not consecutive never disable it."""

from __future__ import annotations

import warnings

import numpy as np
from reliability_helpers import make_batches, setup_model, user_loop

import gradlog as gl
from gradlog.plugin import Plugin
from gradlog.testing import MemoryWriter
from gradlog.utils.hooks import count_hooks


class HookFailsEventsWork(Plugin):
    """Its tensor hook fails whenever ``fail(step)``; its events always succeed."""

    name = "hook-fails"

    def __init__(self, fail) -> None:
        super().__init__()
        self.fail, self.hook_calls, self.events = fail, 0, 0

    def setup(self, run):
        self.run = run
        run.hooks.register_hook(run.model.fc1.weight, self.hook)

    def hook(self, grad):
        self.hook_calls += 1
        if self.fail(self.run.step):
            raise ValueError(f"hook failed at step {self.run.step}")

    def on_batch_start(self, run, batch):
        self.events += 1

    def on_batch_end(self, run, metrics):
        self.events += 1


def _run(plugin, steps):
    model, opt = setup_model()
    writer = MemoryWriter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gl.watch(model, opt, plugins=[plugin], writer=writer) as run:
            losses = user_loop(run, model, opt, make_batches(steps))
    messages = [str(w.message) for w in caught if "hook-fails" in str(w.message)]
    return model, opt, run, writer, messages, losses


def test_a_hook_failing_every_step_is_disabled_although_its_events_succeed():
    plugin = HookFailsEventsWork(lambda step: True)
    model, opt, run, writer, messages, losses = _run(plugin, 6)
    assert plugin.hook_calls == 3  # disabled after the third failure: never called again
    assert [m.split(" (failure ")[1].split(" in a row")[0] for m in messages] == ["1", "2", "3"]
    assert "disabled after 3" in messages[-1] and "at step 2" in messages[-1]
    assert plugin.events == 3 + 2  # 3 batch starts, 2 batch ends: disabled in step 2's backward
    assert len(writer.series("text", "plugins/errors")) == 3
    assert count_hooks(model, opt) == 0 and run.handles_left() == 0
    assert len(losses) == 6 and np.isfinite(losses).all()


def test_failures_of_a_hook_that_are_not_consecutive_never_disable_it():
    plugin = HookFailsEventsWork(lambda step: step % 2 == 0)  # fails, works, fails, ...
    model, opt, run, writer, messages, losses = _run(plugin, 8)
    assert plugin.hook_calls == 8 and len(messages) == 4
    assert all("failure 1 in a row of 3 allowed" in m for m in messages)
    assert count_hooks(model, opt) == 0
