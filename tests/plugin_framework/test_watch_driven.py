"""``watch_driven``: the run of a framework integration, whose steps the framework's callbacks
announce to ``run.driver``: nothing of ``gl.watch`` hooks the model or the optimizer, the
framework's logger directory is shared, and a checkpoint's run state is restored before the
plugins start."""

from __future__ import annotations

import pytest
from plugin_helpers import cross_entropy, make_batches, setup_model

import gradlog as gl
from gradlog.plugin import Plugin, watch_driven
from gradlog.tensorboard import SummaryWriter
from gradlog.utils.hooks import count_hooks


class Recorder(Plugin):
    name = "recorder"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int]] = []
        self.restored_before_setup: int | None = None
        self.loaded: dict | None = None

    def setup(self, run):
        self.restored_before_setup = None if self.loaded is None else self.loaded["steps"]

    def on_batch_start(self, run, batch):
        self.seen.append(("on_batch_start", run.step))

    def on_before_optimizer_step(self, run):
        self.seen.append(("on_before_optimizer_step", run.step))

    def on_after_optimizer_step(self, run):
        self.seen.append(("on_after_optimizer_step", run.step))

    def state_dict(self):
        return {"steps": sum(e == "on_after_optimizer_step" for e, _ in self.seen)}

    def load_state_dict(self, state):
        self.loaded = dict(state)


def _train(run, model, opt, batches):
    """A framework's loop: it calls the driver where its own callbacks would fire."""
    for x, y in batches:
        run.driver.batch_start((x, y))
        opt.zero_grad()
        cross_entropy(model(x), y).backward()
        run.driver.gradients_final(opt)
        opt.step()
        run.driver.step_end()
        run.driver.batch_end()


def test_nothing_hooks_the_model_or_optimizer_and_only_driven_steps_count(tmp_path):
    model, opt = setup_model()
    rec = Recorder()
    run = watch_driven(model, opt, logdir=str(tmp_path), plugins=[rec], strict=True)
    assert count_hooks(model, opt) == 0
    x, y = make_batches(1)[0]
    opt.zero_grad()
    cross_entropy(model(x), y).backward()
    opt.step()  # a step nobody announced: no event, no step
    assert rec.seen == [] and run.step == 0
    _train(run, model, opt, make_batches(2))
    run.finish()
    assert rec.seen == [("on_batch_start", 0), ("on_before_optimizer_step", 0),
                        ("on_after_optimizer_step", 0), ("on_batch_start", 1),
                        ("on_before_optimizer_step", 1), ("on_after_optimizer_step", 1)]
    assert run.step == 2 and run.handles_left() == 0


def test_the_frameworks_logger_directory_is_shared_where_watch_refuses_it(tmp_path):
    with SummaryWriter(str(tmp_path)) as other:  # the framework's own logger
        other.add_scalar("framework/loss", 1.0, 0)
    model, opt = setup_model()
    with pytest.raises(FileExistsError, match="already holds a run"):
        gl.watch(model, opt, logdir=str(tmp_path))
    before = {p.name for p in tmp_path.iterdir()}
    run = watch_driven(model, opt, logdir=str(tmp_path), plugins=["grad-norm:every=1"])
    _train(run, model, opt, make_batches(2))
    run.finish()
    ours = {p.name for p in tmp_path.iterdir()} - before
    assert len(ours) == 1 and "tfevents" in ours.pop()
    from gradlog.doctor.logdir import read_trace
    trace = read_trace(str(tmp_path))
    assert trace.scalars["framework/loss"] == {0: 1.0}
    assert sorted(trace.scalars["grad-norm/global"]) == [0, 1]


def test_a_checkpointed_run_state_is_restored_before_the_plugins_start(tmp_path):
    model, opt = setup_model()
    first = Recorder()
    run = watch_driven(model, opt, logdir=str(tmp_path / "a"), plugins=[first])
    _train(run, model, opt, make_batches(3))
    state = run.state_dict()
    run.finish()
    again = Recorder()
    run = watch_driven(model, opt, logdir=str(tmp_path / "b"), plugins=[again], state=state)
    assert run.step == 3 and again.restored_before_setup == 3
    _train(run, model, opt, make_batches(1))
    run.finish()
    assert again.seen[0] == ("on_batch_start", 3) and run.step == 4


def test_every_sets_the_cadence_of_named_plugins_that_were_not_given_one(tmp_path):
    model, opt = setup_model()
    run = watch_driven(model, opt, logdir=str(tmp_path), every=7,
                       plugins=["grad-norm", "histogram:every=5", "nan-guard"],
                       config={"plugins": {"activation-stats": {"every": 3}}})
    run.finish()
    assert run.plugin("grad-norm").options.every == 7
    assert run.plugin("histogram").options.every == 5
    assert run.plugin("activation-stats").options.every == 3
    assert not hasattr(run.plugin("nan-guard").options, "every")
