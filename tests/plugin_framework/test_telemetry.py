"""The framework's telemetry: each plugin's time per step and the writer's queue waits charged
to the plugin whose call waited."""

from __future__ import annotations

import os

import numpy as np
from plugin_helpers import make_batches, setup_model, user_loop
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event

import gradlog as gl
from gradlog.plugin import Plugin
from gradlog.tensorboard import SummaryWriter
from gradlog.testing import MemoryWriter


def _scalars(log_dir) -> dict[str, list[float]]:
    """Every scalar in ``log_dir``, read by TensorBoard's loader."""
    (name,) = [n for n in os.listdir(log_dir) if "tfevents" in n]
    out: dict[str, list[float]] = {}
    for raw in RawEventFileLoader(os.path.join(log_dir, name)).Load():
        for value in Event.FromString(raw).summary.value:
            if value.HasField("simple_value"):
                out.setdefault(value.tag, []).append(value.simple_value)
    return out


class Logs(Plugin):
    """Logs ``per_step`` histograms of ``size`` values after each optimizer step."""

    name = "logs"

    def __init__(self, per_step: int = 3, size: int = 8) -> None:
        super().__init__()
        self.per_step, self.size = per_step, size

    def on_after_optimizer_step(self, run) -> None:
        for i in range(self.per_step):
            run.log_histogram(f"logs/h{i}", np.arange(self.size, dtype=np.float32))


class Quiet(Plugin):
    """Listens to every step and logs nothing."""

    name = "quiet"

    def on_after_optimizer_step(self, run) -> None:
        pass


class WaitingWriter(MemoryWriter):
    """A writer whose every histogram waited once for its queue (as a full background queue
    makes gradlog's writer wait)."""

    queue_waits = 0

    def add_histogram(self, *args, **kwargs) -> None:
        self.queue_waits += 1
        super().add_histogram(*args, **kwargs)


def test_each_plugins_queue_waits_per_step_are_the_waits_of_its_own_calls():
    model, opt = setup_model()
    writer = WaitingWriter()
    with gl.watch(model, opt, plugins=[Quiet(), Logs(per_step=3)], writer=writer) as run:
        user_loop(run, model, opt, make_batches(4))
        run.epoch_end()  # a telemetry point for the 4 steps
    assert writer.series("scalar", "plugins/logs/queue_waits").values == [3.0]
    assert writer.series("scalar", "plugins/quiet/queue_waits").values == [0.0]
    assert writer.series("scalar", "plugins/logs/queue_waits").steps == [3]
    assert len(writer.series("scalar", "plugins/logs/ms_per_step")) == 1


def test_a_writer_without_a_queue_gets_no_queue_waits():
    model, opt = setup_model()
    writer = MemoryWriter()
    with gl.watch(model, opt, plugins=[Logs()], writer=writer) as run:
        user_loop(run, model, opt, make_batches(2))
        run.epoch_end()
    assert "plugins/logs/ms_per_step" in writer.tags("scalar")
    assert "plugins/logs/queue_waits" not in writer.tags("scalar")


def test_the_background_writers_waits_are_charged_to_the_plugins_that_waited(tmp_path):
    model, opt = setup_model()
    writer = SummaryWriter(tmp_path, max_queue=1)  # every call waits for the one before it
    with gl.watch(model, opt, plugins=[Quiet(), Logs(per_step=4, size=50_000)],
                  writer=writer) as run:
        user_loop(run, model, opt, make_batches(3))
        run.epoch_end()
        waited = writer.queue_waits
    writer.close()
    logged = _scalars(tmp_path)
    assert logged["plugins/quiet/queue_waits"] == [0.0]
    (per_step,) = logged["plugins/logs/queue_waits"]  # a count over 3 steps, as float32
    waits = round(per_step * 3)
    assert abs(waits - per_step * 3) < 1e-5
    assert 0 <= waits <= waited  # (how many depends on the machine; never more)
