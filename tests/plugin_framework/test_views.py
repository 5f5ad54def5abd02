"""Each plugin's view of the run is its own: a registrar kept by a closure or used from
another thread is still that plugin's (its hooks are its own, run under its policy and removed
with it), and a plugin's generator is its own."""

from __future__ import annotations

import threading

import pytest
from plugin_helpers import make_batches, setup_model, user_loop

import gradlog as gl
from gradlog.plugin import Plugin, PluginRun
from gradlog.testing import MemoryWriter
from gradlog.utils.hooks import count_hooks


class Keeper(Plugin):
    """Keeps its ``run`` (the view) from setup, and registers hooks with it later: from
    another plugin's event and from a thread."""

    name = "keeper"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def setup(self, run):
        self.view = run
        self.registrar = run.hooks

    def fail(self, module, args, output):
        self.calls += 1
        raise ValueError("keeper's hook")


class Other(Plugin):
    """Calls the keeper's kept registrar from its own event."""

    name = "other"

    def __init__(self, keeper) -> None:
        super().__init__()
        self.keeper = keeper

    def on_batch_end(self, run):
        if run.step == 0:
            self.keeper.registrar.register_forward_hook("fc1", self.keeper.fail)
            assert run.hooks is not self.keeper.registrar


def test_a_kept_registrar_registers_for_its_own_plugin_whoever_calls_it():
    keeper = Keeper()
    model, opt = setup_model()
    writer = MemoryWriter()
    with pytest.warns(RuntimeWarning) as caught, \
            gl.watch(model, opt, plugins=[keeper, Other(keeper)], writer=writer) as run:
        user_loop(run, model, opt, make_batches(5))
    messages = [str(w.message) for w in caught]
    # the failures are the keeper's (not the caller's), and disable the keeper after 3
    assert len(messages) == 3 and all("plugin 'keeper'" in m for m in messages)
    assert "disabled after 3" in messages[-1] and keeper.calls == 3
    assert count_hooks(model, opt) == 0


def test_a_thread_uses_the_view_it_was_given():
    keeper = Keeper()
    model, opt = setup_model()
    seen = {}
    with gl.watch(model, opt, plugins=[keeper], writer=MemoryWriter()) as run:
        def work():
            view = keeper.view
            seen["handle"] = view.hooks.register_forward_hook("fc2", lambda m, a, o: None)
            seen["draw"] = float(gl.rand(1, generator=view.rng).item())
            seen["step"] = view.step
        t = threading.Thread(target=work)
        t.start()
        t.join(timeout=30)
        assert not t.is_alive()
        assert isinstance(keeper.view, PluginRun) and keeper.view.engine is run.engine
        assert len(keeper.registrar) == 1 and count_hooks(model) > 0
        user_loop(run, model, opt, make_batches(1))
    assert seen["step"] == 0 and 0.0 <= seen["draw"] < 1.0
    assert count_hooks(model, opt) == 0  # the thread's hook was the keeper's: removed


def test_every_plugin_gets_its_own_view_and_generator():
    class Draw(Plugin):
        def __init__(self, name):
            super().__init__()
            self.views = []

        def on_batch_start(self, run, batch):
            self.views.append(run)
            self.value = float(gl.rand(1, generator=run.rng).item())

    class A(Draw):
        name = "a"

    class B(Draw):
        name = "b"

    a, b = A("a"), B("b")
    model, opt = setup_model()
    with gl.watch(model, opt, plugins=[a, b], writer=MemoryWriter()) as run:
        user_loop(run, model, opt, make_batches(2))
    assert a.views[0] is a.views[1] and a.views[0] is not b.views[0]
    assert a.views[0].hooks is not b.views[0].hooks and a.value != b.value
    assert repr(a.views[0]).startswith("<run as plugin 'a' sees it")
