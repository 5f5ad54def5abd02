"""An event method receives the arguments its signature names, however it spells them: ``run``
by position or keyword only, the event's other values by name, everything through
``**kwargs``, or nothing at all. (Most events are called by position, the cheapest call; the
others by keyword.)"""

from __future__ import annotations

from plugin_helpers import make_batches, setup_model, user_loop

import gradlog as gl
from gradlog.plugin import Plugin, PluginRun
from gradlog.testing import MemoryWriter


class Spellings(Plugin):
    name = "spellings"

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, list] = {}

    def _note(self, event: str, value) -> None:
        self.seen.setdefault(event, []).append(value)

    def on_batch_start(self, run):  # run by position
        self._note("batch_start", isinstance(run, PluginRun))

    def on_after_backward(self, *, run):  # run by keyword only
        self._note("after_backward", isinstance(run, PluginRun))

    def on_before_optimizer_step(self, **kwargs):  # everything by name
        self._note("before_step", sorted(kwargs))

    def on_after_optimizer_step(self):  # nothing
        self._note("after_step", None)

    def on_batch_end(self, run, metrics):  # run and the event's other value
        self._note("batch_end", (isinstance(run, PluginRun), metrics))

    def on_validation_end(self, metrics, run=None):  # run second, with a default
        self._note("validation_end", (isinstance(run, PluginRun), metrics))


def test_each_spelling_gets_what_it_names():
    model, opt = setup_model()
    plugin = Spellings()
    with gl.watch(model, opt, writer=MemoryWriter(), plugins=[plugin], strict=True) as run:
        user_loop(run, model, opt, make_batches(3))
        run.validation_end({"val/acc": 0.5})
    seen = plugin.seen
    assert seen["batch_start"] == [True, True, True]
    assert seen["after_backward"] == [True, True, True]
    assert seen["before_step"] == [["run"]] * 3
    assert seen["after_step"] == [None, None, None]
    assert [run_ok for run_ok, _ in seen["batch_end"]] == [True, True, True]
    assert all(isinstance(m, dict) for _, m in seen["batch_end"])
    assert seen["validation_end"] == [(True, {"val/acc": 0.5})]
