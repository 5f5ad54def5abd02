"""The step driver driven explicitly, as ``gradlog train`` and framework integrations do: the
events in order with the step each fires at, a skipped step that still moves the step on, a
phase that only a context sets, and the state moved before the events that announce it."""

from __future__ import annotations

import pytest
from plugin_helpers import setup_model

from gradlog.plugin import Plugin, Run, StopTraining
from gradlog.testing import MemoryWriter

EVENTS = ("on_batch_start", "on_after_backward", "on_before_optimizer_step",
          "on_after_optimizer_step", "on_batch_end", "on_validation_end", "on_epoch_end")


class Recorder(Plugin):
    name = "recorder"

    def __init__(self, stop_at: str | None = None) -> None:
        super().__init__()
        self.seen: list[tuple[str, int, str]] = []
        self.stop_at = stop_at

    def _note(self, run, event):
        self.seen.append((event, run.step, run.phase))
        if event == self.stop_at:
            raise StopTraining


for _event in EVENTS:
    def _method(self, run, _event=_event):
        self._note(run, _event)
    setattr(Recorder, _event, _method)


def _run(plugin):
    model, opt = setup_model()
    run = Run(model, opt, writer=MemoryWriter(), plugins=[plugin], auto_batches=False,
              telemetry_every=0, strict=True)
    return run, opt


def test_explicit_calls_fire_the_events_in_order_at_their_steps():
    plugin = Recorder()
    run, opt = _run(plugin)
    driver = run.driver
    with run:
        for _ in range(2):
            assert driver.batch_start("batch") == "batch"
            driver.gradients_final(opt)
            driver.step_end()
            driver.batch_end()
        driver.batch_start("batch")
        driver.step_skipped()  # (an AMP loss scaler found inf: no gradient event)
        driver.batch_end()
        with driver.in_phase("validation"):
            assert run.phase == "validation"
        driver.validation_end({"val/loss": 1.0})
        driver.epoch_end()
    step_events = EVENTS[:5]
    assert plugin.seen == [(e, s, "train") for s in (0, 1) for e in step_events] + [
        ("on_batch_start", 2, "train"), ("on_batch_end", 2, "train"),
        ("on_validation_end", 3, "train"), ("on_epoch_end", 3, "train")]
    assert run.step == 3 and run.epoch == 1 and run.amp_skipped_steps == 1
    assert run.phase == "train"


@pytest.mark.parametrize("event, step", [
    ("on_batch_start", 0), ("on_after_backward", 0), ("on_before_optimizer_step", 0),
    ("on_after_optimizer_step", 1), ("on_batch_end", 1)])
def test_a_stop_leaves_the_run_at_the_step_the_optimizer_reached(event, step):
    plugin = Recorder(stop_at=event)
    run, opt = _run(plugin)
    driver = run.driver
    with run:
        driver.batch_start("batch")
        driver.gradients_final(opt)
        driver.step_end()
        driver.batch_end()
    assert run.step == step  # (the checkpoint a stop writes resumes with the next one)
    assert [e for e, _, _ in plugin.seen].count("on_batch_end") <= 1
