"""``Plugin.batch_events_every()``: a plugin that returns N hears the batch events on steps 0,
N, 2N, ... only, every one of them on those steps, and the other events always; under an
optimizer the run holds no end-of-backward signal at all (``on_after_backward`` fires at the
optimizer's step)."""

from __future__ import annotations

import pytest
from plugin_helpers import cross_entropy, make_batches, setup_model, user_loop

import gradlog as gl
from gradlog.plugin import Plugin, PluginConfigError, Run
from gradlog.testing import MemoryWriter

BATCH = ["batch_start", "after_backward", "before_step", "after_step", "batch_end"]


def _recording(event: str):
    """An event method that notes ``(event, run.step)``."""
    def method(self, run):
        self.seen.append((event, run.step))
    return method


class Recorder(Plugin):
    name = "recorder"

    def __init__(self, every: int, name: str = "recorder") -> None:
        super().__init__()
        self.every = every
        self.name = name
        self.seen: list[tuple[str, int]] = []

    def batch_events_every(self) -> int:
        return self.every

    on_batch_start = _recording("batch_start")
    on_after_backward = _recording("after_backward")
    on_before_optimizer_step = _recording("before_step")
    on_after_optimizer_step = _recording("after_step")
    on_batch_end = _recording("batch_end")
    on_epoch_end = _recording("epoch_end")


class BackwardOnly(Recorder):
    """Listens to on_after_backward alone (what makes the run hold the signal)."""

    on_batch_start = on_before_optimizer_step = on_after_optimizer_step = None
    on_batch_end = on_epoch_end = None


def _steps(seen, event):
    return [step for e, step in seen if e == event]


def test_batch_events_reach_each_plugin_on_its_own_steps_only():
    model, opt = setup_model()
    every3, every5 = Recorder(3), Recorder(5, name="every5")
    always = Recorder(1, name="always")
    with gl.watch(model, opt, writer=MemoryWriter(), plugins=[every3, every5, always],
                  strict=True) as run:
        user_loop(run, model, opt, make_batches(16))
        run.epoch_end()
    for event in BATCH:
        assert _steps(every3.seen, event) == [0, 3, 6, 9, 12, 15], event
        assert _steps(every5.seen, event) == [0, 5, 10, 15], event
        assert _steps(always.seen, event) == list(range(16)), event
    assert _steps(every3.seen, "epoch_end") == [16]  # other events are not thinned out
    # on a step it hears, the events come in their usual order
    assert [e for e, s in every3.seen if s == 3] == BATCH


def test_under_an_optimizer_no_end_of_backward_signal_is_held():
    model, opt = setup_model()
    plugin = BackwardOnly(2)
    held = {}
    with gl.watch(model, opt, writer=MemoryWriter(), plugins=[plugin], strict=True) as run:
        for x, y in make_batches(4):
            x, y = run.batch(x, y)
            held[run.step] = run.handles_left()
            opt.zero_grad()
            cross_entropy(model(x), y).backward()
            opt.step()
    assert _steps(plugin.seen, "after_backward") == [0, 2]
    assert held[0] == held[1] == held[2] == held[3] == 3  # step pre/post, root forward
    assert run.handles_left() == 0


def test_gradient_accumulation_hears_once_per_optimizer_step():
    model, opt = setup_model()
    plugin = BackwardOnly(2)
    batches = make_batches(8)
    with gl.watch(model, opt, writer=MemoryWriter(), plugins=[plugin], strict=True) as run:
        for i in range(0, 8, 2):  # two micro-batches per optimizer step
            opt.zero_grad()
            for x, y in batches[i:i + 2]:
                x, y = run.batch(x, y)
                cross_entropy(model(x), y).backward()
            opt.step()
    assert _steps(plugin.seen, "after_backward") == [0, 2]


def test_without_an_optimizer_every_backward_still_counts_as_a_step():
    model, _ = setup_model()
    plugin = BackwardOnly(2)
    with pytest.warns(UserWarning, match="without an optimizer"):
        run = gl.watch(model, writer=MemoryWriter(), plugins=[plugin], strict=True)
    with run:
        for x, y in make_batches(5):
            cross_entropy(model(x), y).backward()
    assert _steps(plugin.seen, "after_backward") == [0, 2, 4]
    assert run.step == 5


def test_a_resumed_run_hears_its_steps_from_the_restored_one():
    model, opt = setup_model()
    first = Run(model, opt, writer=MemoryWriter(), plugins=[Recorder(4)], strict=True)
    state = {**first.state_dict(), "step": 3}
    plugin = Recorder(4)
    run = Run(model, opt, writer=MemoryWriter(), plugins=[plugin], strict=True)
    run.load_state_dict(state)
    with run:
        user_loop(run, model, opt, make_batches(3))
    assert _steps(plugin.seen, "batch_end") == [4]


@pytest.mark.parametrize("restored", [0, 5, 8, 13])
def test_a_run_resumed_at_any_step_hears_the_multiples_after_it(restored):
    model, opt = setup_model()
    state = {**Run(model, opt, writer=MemoryWriter()).state_dict(), "step": restored}
    plugin = Recorder(4)
    run = Run(model, opt, writer=MemoryWriter(), plugins=[plugin], strict=True)
    run.load_state_dict(state)
    with run:
        user_loop(run, model, opt, make_batches(6))
    assert _steps(plugin.seen, "batch_end") == [s for s in range(restored, restored + 6)
                                                if s % 4 == 0]


@pytest.mark.parametrize("value", [0, -2, 1.5, "2", True, None])
def test_a_bad_period_is_a_configuration_error(value):
    model, opt = setup_model()
    with pytest.raises(PluginConfigError, match=rf"plugin 'recorder': batch_events_every\(\) "
                       rf"must return an int >= 1, got {value!r}"):
        Run(model, opt, writer=MemoryWriter(), plugins=[Recorder(value)])


def test_on_torch_on_after_backward_comes_with_the_due_steps_and_no_signal_is_held():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 0])

    def train(plugins) -> list[int]:
        held = []
        with gl.watch(model, opt, writer=MemoryWriter(), plugins=plugins, strict=True) as run:
            for _ in range(7):
                run.batch(x, y)
                held.append(run.handles_left())
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        assert run.handles_left() == 0
        return held

    every3, always = BackwardOnly(3), BackwardOnly(1, name="always")
    train([every3, always])
    assert _steps(every3.seen, "after_backward") == [0, 3, 6]
    assert _steps(always.seen, "after_backward") == list(range(7))
    periodic = BackwardOnly(3, name="periodic")
    held = train([periodic])
    assert _steps(periodic.seen, "after_backward") == [0, 3, 6]
    assert held == [3] * 7  # step pre/post hooks and the root forward's, on every step
