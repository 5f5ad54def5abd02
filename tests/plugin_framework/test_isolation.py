"""The failure policy: observers are isolated (reported, disabled after max_failures
consecutive failures, their hooks removed), mutators stop the run, strict makes everything
fatal, and control flow (SkipStep, StopTraining, PluginAbort) is never swallowed."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from plugin_helpers import cross_entropy, make_batches, setup_model, user_loop

import gradlog as gl
from gradlog.plugin import (
    Plugin,
    PluginAbort,
    PluginError,
    SkipStep,
    StopTraining,
)
from gradlog.testing import MemoryWriter
from gradlog.utils.hooks import count_hooks


def _failing(kind: str, where: str, times: int = 10**9):
    """A plugin whose ``where`` hook or event raises the first ``times`` times."""

    class Faulty(Plugin):
        name = "faulty"

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def boom(self, *args, **kwargs):
            self.calls += 1
            if self.calls <= times:
                raise ValueError(f"boom {self.calls}")

        def setup(self, run):
            h, m = run.hooks, run.model
            register = {
                "tensor hook": lambda: h.register_hook(m.fc1.weight, self.boom),
                "post-accumulate-grad hook": lambda: h.register_post_accumulate_grad_hook(
                    m.fc1.weight, self.boom),
                "forward hook": lambda: h.register_forward_hook("fc1", self.boom),
                "forward pre-hook": lambda: h.register_forward_pre_hook("fc1", self.boom),
                "backward hook": lambda: h.register_full_backward_hook("fc2", self.boom),
                "backward pre-hook": lambda: h.register_full_backward_pre_hook("fc2", self.boom),
                "optimizer step pre-hook": lambda: h.register_step_pre_hook(self.boom),
                "optimizer step post-hook": lambda: h.register_step_post_hook(self.boom),
            }
            if where in register:
                register[where]()

    Faulty.kind = kind
    if where.startswith("on_"):
        def event(self, run):
            self.boom()
        setattr(Faulty, where, event)
    return Faulty()


WHERE = ["tensor hook", "post-accumulate-grad hook", "forward hook", "forward pre-hook",
         "backward hook", "backward pre-hook", "optimizer step pre-hook",
         "optimizer step post-hook", "on_batch_start", "on_after_backward",
         "on_before_optimizer_step", "on_after_optimizer_step", "on_batch_end"]


def _watch(plugins, **kw):
    model, opt = setup_model()
    writer = MemoryWriter()
    run = gl.watch(model, opt, plugins=plugins, writer=writer, **kw)
    return model, opt, writer, run


@pytest.mark.parametrize("where", WHERE)
def test_failing_observer_is_disabled_and_training_goes_on(where):
    plugin = _failing("observer", where)
    model, opt, writer, run = _watch([plugin])
    with pytest.warns(RuntimeWarning) as caught, run:
        losses = user_loop(run, model, opt, make_batches(6))
    messages = [str(w.message) for w in caught if "faulty" in str(w.message)]
    assert len(messages) == 3, messages
    assert f"failed in {where} at step 0" in messages[0]
    assert "disabled after 3" in messages[2]
    assert plugin.calls == 3  # disabled: never called again
    assert len(losses) == 6 and np.isfinite(losses).all()
    errors = writer.series("text", "plugins/errors")
    assert len(errors) == 3 and "boom 1" in errors.values[0] and "Traceback" in errors.values[0]
    assert count_hooks(model, opt) == 0 and run.handles_left() == 0


def test_consecutive_means_consecutive():
    plugin = _failing("observer", "on_batch_end", times=2)
    model, opt, writer, run = _watch([plugin])
    with pytest.warns(RuntimeWarning), run:
        user_loop(run, model, opt, make_batches(6))
    assert plugin.calls == 6  # two failures, then successes: never disabled
    assert len(writer.series("text", "plugins/errors")) == 2


@pytest.mark.parametrize("where", ["forward hook", "tensor hook", "on_batch_end",
                                   "on_before_optimizer_step", "backward hook"])
def test_failing_mutator_stops_the_run(where):
    plugin = _failing("mutator", where)
    model, opt, writer, run = _watch([plugin])
    with pytest.raises(PluginError) as info, run:
        user_loop(run, model, opt, make_batches(6))
    assert info.value.plugin == "faulty" and info.value.event == where
    assert "plugin 'faulty' failed in" in str(info.value) and "boom 1" in str(info.value)
    assert count_hooks(model, opt) == 0


def test_strict_makes_observer_failures_fatal():
    model, opt, writer, run = _watch([_failing("observer", "forward hook")], strict=True)
    with pytest.raises(PluginError, match="faulty"), run:
        user_loop(run, model, opt, make_batches(3))
    assert count_hooks(model, opt) == 0


def test_observer_hook_returning_a_value_is_a_failure():
    class Returns(Plugin):
        name = "returns"

        def setup(self, run):
            run.hooks.register_hook(run.model.fc1.weight, lambda g: g * 0)

    model, opt, writer, run = _watch([Returns()])
    with pytest.warns(RuntimeWarning, match="must return None"), run:
        user_loop(run, model, opt, make_batches(2))
    errors = writer.series("text", "plugins/errors").values
    assert errors and "must return None" in errors[0]
    model2, opt2 = setup_model()
    ref = user_loop_plain(model2, opt2, make_batches(2))
    # the returned zeros were ignored: training matches a run without the plugin
    np.testing.assert_array_equal(model.fc1.weight.detach().numpy(),
                                  model2.fc1.weight.detach().numpy())
    assert ref


def user_loop_plain(model, opt, batches):
    out = []
    for x, y in batches:
        opt.zero_grad()
        loss = cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        out.append(float(loss.item()))
    return out


def test_plugin_abort_always_propagates():
    class Aborts(Plugin):
        name = "aborts"

        def on_batch_end(self, run):
            raise PluginAbort("stop now")

    model, opt, writer, run = _watch([Aborts()])
    with pytest.raises(PluginAbort, match="stop now"), run:
        user_loop(run, model, opt, make_batches(3))
    assert count_hooks(model, opt) == 0


def test_stop_training_ends_cleanly():
    class Stops(Plugin):
        name = "stops"

        def on_after_optimizer_step(self, run):
            if run.step == 1:
                raise StopTraining

    model, opt, writer, run = _watch([Stops()])
    finished = []
    with run:
        user_loop(run, model, opt, make_batches(5))
        finished.append(True)
    assert not finished  # StopTraining left the loop at the second step, then was swallowed
    # the optimizer had applied step 1: the run ends after it, at step 2 (a checkpoint then
    # resumes with the step that comes next)
    assert run.step == 2 and count_hooks(model, opt) == 0
    assert not writer.closed  # a writer passed in belongs to the caller


def test_skip_step_leaves_parameters_and_momentum_untouched():
    class Skips(Plugin):
        name = "skips"
        kind = "mutator"
        order = 0

        def on_before_optimizer_step(self, run):
            if run.step == 2:
                raise SkipStep

    seen = {}

    class Spy(Plugin):
        name = "spy"

        def on_batch_start(self, run, batch):
            if run.step == 2:
                seen["params"] = [p.detach().numpy().copy() for p in run.model.parameters()]
                seen["momentum"] = [run.optimizer.state[p]["momentum_buffer"].numpy().copy()
                                    for p in run.model.parameters()]

        def on_batch_end(self, run, metrics):
            if run.step == 2:
                seen["after"] = [p.detach().numpy().copy() for p in run.model.parameters()]
                seen["momentum_after"] = [
                    run.optimizer.state[p]["momentum_buffer"].numpy().copy()
                    for p in run.model.parameters()]

    model, opt, writer, run = _watch([Skips(), Spy()])
    with run:
        user_loop(run, model, opt, make_batches(4))
    for before, after in zip(seen["params"] + seen["momentum"],
                             seen["after"] + seen["momentum_after"]):
        np.testing.assert_array_equal(before, after)
    assert run.skipped_steps == 1 and run.step == 4


def test_warnings_name_plugin_event_and_step():
    plugin = _failing("observer", "on_after_backward", times=1)
    model, opt, writer, run = _watch([plugin])
    with warnings.catch_warnings(record=True) as caught, run:
        warnings.simplefilter("always")
        user_loop(run, model, opt, make_batches(2))
    text = "\n".join(str(w.message) for w in caught)
    assert "plugin 'faulty' (observer) failed in on_after_backward at step 0: ValueError: boom 1" \
        in text


def test_stop_training_at_every_batch_end_ends_the_batch_once():
    class StopsAlways(Plugin):
        name = "stops-always"

        def __init__(self):
            super().__init__()
            self.batch_ends = 0

        def on_batch_end(self, run):
            self.batch_ends += 1
            raise StopTraining

    plugin = StopsAlways()
    model, opt, writer, run = _watch([plugin])
    with run:
        user_loop(run, model, opt, make_batches(5))
    # the first batch's end stopped the run; finishing it did not end that batch again
    assert plugin.batch_ends == 1 and run.step == 1 and count_hooks(model, opt) == 0


# -- hooks a plugin registers on the model directly --------------------------------------------

class DirectRegistrar(Plugin):
    """Registers hooks on the model and the optimizer directly (not through run.hooks) in
    setup and on_epoch_end, and one through run.hooks; counts each hook's calls."""

    name = "direct"

    def __init__(self, model, opt) -> None:
        super().__init__()
        self.model, self.opt = model, opt
        self.calls = {"forward": 0, "pre": 0, "tensor": 0, "step": 0, "registrar": 0}

    def _count(self, kind):
        def hook(*args, **kwargs):
            self.calls[kind] += 1
        hook.__name__ = f"{kind}_hook"
        return hook

    def setup(self, run):
        first = next(iter(self.model.children()))
        first.register_forward_hook(self._count("forward"), with_kwargs=True, always_call=True)
        next(iter(self.model.parameters())).register_hook(self._count("tensor"))
        self.opt.register_step_post_hook(self._count("step"))
        run.hooks.register_forward_hook(first, self._count("registrar"))

    def on_epoch_end(self, run):
        self.model.register_forward_pre_hook(self._count("pre"))


class TidyDirect(Plugin):
    """Registers a hook directly and removes it itself in teardown: nothing to report."""

    name = "tidy"

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def setup(self, run):
        self.handle = self.model.register_forward_hook(lambda *a: None)

    def teardown(self, run):
        self.handle.remove()


def _torch_or_gradlog(engine):
    if engine == "gradlog":
        model, opt = setup_model()
        batches = make_batches(2)
        return model, opt, batches, cross_entropy
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(4, 8), torch.randint(0, 3, (4,))) for _ in range(2)]
    return model, opt, batches, torch.nn.functional.cross_entropy


@pytest.mark.parametrize("engine", ["gradlog", "torch"])
def test_hooks_a_plugin_registers_directly_are_removed_with_a_warning(engine):
    model, opt, batches, loss_fn = _torch_or_gradlog(engine)

    def step(x, y):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    user_calls = []
    direct = DirectRegistrar(model, opt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gl.watch(model, opt, plugins=[direct, TidyDirect(model)],
                      writer=MemoryWriter()) as run:
            for x, y in batches:
                step(*run.batch(x, y))
            # the user's own hook, registered during the run: not the plugins', kept
            user_handle = model.register_forward_hook(lambda *a: user_calls.append(1))
            run.epoch_end()
            step(*batches[0])
    assert direct.calls == {"forward": 3, "pre": 1, "tensor": 3, "step": 3, "registrar": 3}
    messages = [str(w.message) for w in caught if "registered" in str(w.message)]
    assert len(messages) == 1, messages
    assert messages[0].startswith("plugin 'direct' registered 4 hook(s) on the model or "
                                  "optimizer directly, not through run.hooks (")
    for name in ("forward_hook", "tensor_hook", "step_hook", "pre_hook"):
        assert name in messages[0], messages[0]
    assert "removed at the end of the run" in messages[0]
    assert run.engine.count_hooks(model, opt) == 1  # the user's hook alone
    step(*batches[1])  # the plugin's hooks fire no more; the user's does
    assert direct.calls == {"forward": 3, "pre": 1, "tensor": 3, "step": 3, "registrar": 3}
    assert len(user_calls) == 2
    user_handle.remove()
    assert run.engine.count_hooks(model, opt) == 0
    first = next(iter(model.children()))
    assert not first._forward_hooks_with_kwargs and not first._forward_hooks_always_called
