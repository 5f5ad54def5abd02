"""Faulty plugins under ``gradlog train`` (run in this process on the tiny configuration): a fault
injected into every event and every hook kind -- an exception, a returned value (of the wrong
shape or dtype, NaN, Inf, not a tensor), a hook that registers more hooks, a hook that removes
itself. Observers are reported and disabled after 3 failures in a row and never change the
trajectory; mutators stop the run (exit 1) with a message naming the plugin, after every
plugin's ``on_exception``. In every case the logdir reads back and the checkpoints are intact.
"""

from __future__ import annotations

import io
import os
import sys
import types
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
from reliability_helpers import (
    PLUGINS,
    STEPS,
    accumulated,
    event_files,
    strict_records,
    text_steps,
)

import gradlog as gl
from gradlog.plugin import Plugin, PluginError
from gradlog.train import TrainOptions, runs, train
from gradlog.utils.hooks import count_hooks

pytestmark = pytest.mark.slow

_module = types.ModuleType("gradlog_reliability_plugins")  # what the subprocess tests install
sys.modules.setdefault(_module.__name__, _module)  # (dataclasses look their module up)
exec(compile(PLUGINS, "gradlog_reliability_plugins.py", "exec"), _module.__dict__)
Faulty, FaultyMutator = _module.Faulty, _module.FaultyMutator

EVENTS = ["on_train_start", "on_epoch_start", "on_batch_start", "on_after_backward",
          "on_before_optimizer_step", "on_after_optimizer_step", "on_batch_end",
          "on_validation_end", "on_epoch_end", "on_train_end"]
HOOKS = ["tensor hook", "post-accumulate-grad hook", "forward pre-hook", "forward hook",
         "backward pre-hook", "backward hook", "optimizer step pre-hook",
         "optimizer step post-hook"]
# how often each place is reached in training (phase "train") over the 8 steps
FIRES = {**{w: STEPS for w in HOOKS + EVENTS}, "on_epoch_start": 2, "on_validation_end": 2,
         "on_epoch_end": 2, "on_train_start": 1, "on_train_end": 1, "setup": 1}
TAGS = ("train/loss", "train/acc", "val/loss", "val/acc")


class Spy(Plugin):
    """An observer that records the errors it is told about (set up before the others)."""

    name = "spy"
    order = 0

    def __init__(self) -> None:
        super().__init__()
        self.errors: list = []

    def on_exception(self, run, error):
        self.errors.append(error)


@dataclass
class Ran:
    code: int
    err: str
    messages: list[str]   # the warnings about plugin failures
    run_dir: str
    run: object           # the Run (model, optimizer, registrar handles)


def _train(tmp_path, *plugins, strict: bool = False) -> Ran:
    run_dir = str(tmp_path / "run")
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = train(TrainOptions(logdir=run_dir, epochs=2, plugins=plugins, quiet=True,
                                  default_plugins=False, strict_plugins=strict,
                                  extra={"train_size": 256, "val_size": 64,
                                         "two_object_size": 8}), out, err)
    # under gradlog train a plugin failure is a gradlog message, never a raw Python warning
    assert not [w for w in caught if "plugin 'faulty" in str(w.message)], caught
    messages = [line.removeprefix("warning: ") for line in err.getvalue().splitlines()
                if line.startswith("warning: plugin 'faulty") and " failed in " in line]
    return Ran(code, err.getvalue(), messages, run_dir, getattr(plugins[0], "run", None))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A run without plugins: its scalars and its checkpoints' models."""
    ran = _train(tmp_path_factory.mktemp("reference"), Spy())
    assert ran.code == 0, ran.err
    models = {step: runs.load_checkpoint(path)["model"]
              for step, path in runs.checkpoints(ran.run_dir)}
    return accumulated(ran.run_dir), models


def _readable(run_dir: str) -> dict:
    """Both loaders read every file; CRCs hold; nothing is torn (the run closed its files)."""
    for path in event_files(run_dir):
        assert strict_records(path)[1] == 0, path
    return accumulated(run_dir)


def _checkpoint_intact(run_dir: str, newest: int | None, reference) -> None:
    path = runs.newest_checkpoint(run_dir)
    if newest is None:
        assert path is None
        return
    assert path is not None and path.endswith(f"checkpoint-{newest:08d}.npz")
    model = gl.load(path)["model"]
    expected = reference[1][newest]
    assert model.keys() == expected.keys()
    for name in model:
        np.testing.assert_array_equal(model[name].numpy(), expected[name].numpy(), name)


def _no_hooks_left(ran: Ran) -> None:
    run = ran.run
    assert count_hooks(run.model, run.optimizer) == 0 and run.handles_left() == 0


# -- observers ----------------------------------------------------------------------------------

def _observer_failures_isolated(ran: Ran, plugin, where: str, reference) -> None:
    assert ran.code == 0, ran.err
    expected = 1 if where == "setup" else min(FIRES[where], 3)
    assert plugin.faults == expected  # once disabled, never called again
    assert len(ran.messages) == expected, ran.messages
    assert f"plugin 'faulty' (observer) failed in {where} at step " in ran.messages[0]
    disabled = where == "setup" or FIRES[where] >= 3
    assert ("disabled after" in ran.messages[-1]) == disabled, ran.messages[-1]
    last = ran.err.splitlines()[-1]  # the end of the run lists the plugins it disabled
    if disabled:
        times = "1 failure" if where == "setup" else "3 failures in a row"
        assert last.startswith(f"warning: plugin 'faulty' was disabled during the run: {times} "
                               f"in {where}, the last at step "), last
    else:
        assert "was disabled" not in ran.err
    found = _readable(ran.run_dir)
    for tag in TAGS:  # failing observers do not change training
        assert found[tag] == reference[0][tag], tag
    assert len(text_steps(ran.run_dir, "plugins/errors")) == expected
    _checkpoint_intact(ran.run_dir, STEPS, reference)
    _no_hooks_left(ran)


@pytest.mark.parametrize("where", ["setup", *EVENTS, *HOOKS])
def test_an_observer_raising_is_reported_disabled_and_changes_nothing(tmp_path, where,
                                                                      reference):
    plugin = Faulty(where=where, fault="raise", at_step=0)
    ran = _train(tmp_path, plugin)
    _observer_failures_isolated(ran, plugin, where, reference)
    assert "ZeroDivisionError: fault injected in" in ran.messages[0]


RETURNS = [(w, "return-value") for w in [*HOOKS, "on_batch_start"]] + [
    (w, f) for w in ("tensor hook", "forward hook", "backward hook")
    for f in ("wrong-shape", "wrong-dtype", "nan", "inf")] + [
    ("on_batch_start", "wrong-shape"), ("on_batch_start", "nan")]


@pytest.mark.parametrize("where, fault", RETURNS)
def test_an_observer_returning_a_value_is_a_failure_and_the_value_is_ignored(
        tmp_path, where, fault, reference):
    plugin = Faulty(where=where, fault=fault, at_step=0)
    ran = _train(tmp_path, plugin)
    _observer_failures_isolated(ran, plugin, where, reference)
    assert "must return None" in ran.messages[0]


class Opaque:
    """Something a checkpoint cannot hold (no pickle)."""


class UnsaveableState(Plugin):
    """Counts its steps; its state holds an object a checkpoint cannot hold."""

    name = "unsaveable"

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def on_batch_end(self, run, metrics):
        self.steps += 1

    def state_dict(self):
        return {"steps": self.steps, "window": Opaque()}


class UnsaveableMutator(UnsaveableState):
    name = "unsaveable-mutator"
    kind = "mutator"


def test_an_observer_whose_state_a_checkpoint_cannot_hold_is_left_out_of_it(tmp_path,
                                                                            reference):
    ran = _train(tmp_path, Spy(), UnsaveableState())
    assert ran.code == 0, ran.err
    warned = [line for line in ran.err.splitlines() if "plugin 'unsaveable'" in line]
    assert len(warned) == 2, ran.err  # a checkpoint at each epoch end, each saved without it
    for n, (line, step) in enumerate(zip(warned, (4, 8)), 1):
        assert line == (
            f"warning: plugin 'unsaveable' (observer) failed in state_dict at step {step}: "
            'TypeError: state_dict()["window"]: unsupported type Opaque (a checkpoint cannot '
            f"hold it) (failure {n} in a row of 3 allowed)"), line
    assert [step for step, _ in runs.checkpoints(ran.run_dir)] == [4, 8]
    state = runs.load_checkpoint(runs.newest_checkpoint(ran.run_dir))
    assert set(state["run"]["plugins"]) == {"spy"}
    assert "unsaveable" in state["run"]["generators"]
    _checkpoint_intact(ran.run_dir, STEPS, reference)
    found = _readable(ran.run_dir)
    for tag in TAGS:
        assert found[tag] == reference[0][tag], tag


def test_a_mutator_whose_state_a_checkpoint_cannot_hold_stops_the_run(tmp_path, reference):
    spy = Spy()
    ran = _train(tmp_path, UnsaveableMutator(), spy)
    assert ran.code == 1
    assert ran.err.splitlines()[0] == (
        "error: plugin 'unsaveable-mutator' failed in state_dict at step 4: TypeError: "
        'state_dict()["window"]: unsupported type Opaque (a checkpoint cannot hold it)'), ran.err
    assert [type(e) for e in spy.errors] == [PluginError]
    assert runs.checkpoints(ran.run_dir) == []


@pytest.mark.parametrize("kind", [Faulty, FaultyMutator])
@pytest.mark.parametrize("where", [*HOOKS, "on_batch_end", "on_after_backward"])
def test_a_hook_that_registers_more_hooks_keeps_the_registries_consistent(
        tmp_path, where, kind, reference):
    plugin = kind(where=where, fault="register-more", at_step=0)
    ran = _train(tmp_path, plugin)
    assert ran.code == 0 and not ran.messages, (ran.err, ran.messages)
    # each due call added a forward hook on the model, and each of those fired afterwards
    assert plugin.faults >= STEPS and plugin.calls > plugin.faults + STEPS
    found = _readable(ran.run_dir)
    for tag in TAGS:
        assert found[tag] == reference[0][tag], tag
    _checkpoint_intact(ran.run_dir, STEPS, reference)
    _no_hooks_left(ran)


@pytest.mark.parametrize("kind", [Faulty, FaultyMutator])
@pytest.mark.parametrize("where", HOOKS)
def test_a_hook_that_removes_itself_is_never_called_again(tmp_path, where, kind, reference):
    plugin = kind(where=where, fault="remove-self", at_step=0)
    ran = _train(tmp_path, plugin)
    assert ran.code == 0 and not ran.messages, (ran.err, ran.messages)
    assert plugin.calls == plugin.faults == 1
    assert plugin.handles == []
    found = _readable(ran.run_dir)
    for tag in TAGS:
        assert found[tag] == reference[0][tag], tag
    _no_hooks_left(ran)


def test_strict_makes_an_observer_failure_stop_the_run(tmp_path, reference):
    spy = Spy()
    ran = _train(tmp_path, Faulty(where="on_batch_end", fault="raise", at_step=5), spy,
                 strict=True)
    assert ran.code == 1
    assert ran.err.splitlines()[0] == ("error: plugin 'faulty' failed in on_batch_end at step "
                                       "5: ZeroDivisionError: fault injected in on_batch_end "
                                       "at step 5")
    assert [type(e) for e in spy.errors] == [PluginError]
    _readable(ran.run_dir)
    _checkpoint_intact(ran.run_dir, 4, reference)


# -- mutators -----------------------------------------------------------------------------------

# the step a mutator's fault comes at, and the newest checkpoint left by the failed run
AT = {**{w: 5 for w in HOOKS + EVENTS}, "on_train_start": 0, "setup": 0,
      "on_epoch_start": 4, "on_validation_end": 8, "on_epoch_end": 8, "on_train_end": 8}
NEWEST = {**{w: 4 for w in AT}, "on_train_start": None, "setup": None, "on_train_end": 8}


def _mutator_stopped_the_run(ran: Ran, spy: Spy, where: str, reference) -> None:
    assert ran.code == 1
    assert len(spy.errors) == 1  # told once, with the error that stopped the run
    found = _readable(ran.run_dir)
    before = AT[where]
    for tag in ("train/loss", "train/acc"):
        points = found.get(tag, [])
        assert [p for p in points if p[0] < before] == \
            [p for p in reference[0][tag] if p[0] < before], tag
        assert set(points) <= set(reference[0][tag])  # nothing after the failure is wrong
    _checkpoint_intact(ran.run_dir, NEWEST[where], reference)
    _no_hooks_left(ran)


@pytest.mark.parametrize("where", ["setup", *EVENTS, *HOOKS])
def test_a_mutator_raising_stops_the_run_naming_plugin_event_and_step(tmp_path, where,
                                                                     reference):
    spy = Spy()
    ran = _train(tmp_path, FaultyMutator(where=where, fault="raise", at_step=AT[where]), spy)
    step = AT[where]
    assert ran.err.splitlines()[0] == (
        f"error: plugin 'faulty-mutator' failed in {where} at step {step}: "
        f"ZeroDivisionError: fault injected in {where} at step {step}")
    assert isinstance(spy.errors[0], PluginError) and spy.errors[0].plugin == "faulty-mutator"
    assert "Traceback" in ran.err and "in _fault" in ran.err  # the plugin's own traceback
    _mutator_stopped_the_run(ran, spy, where, reference)


BAD_RETURNS = [(w, f) for w in HOOKS[:-1] + ["on_batch_start"]
               for f in ("wrong-shape", "return-value")]


@pytest.mark.parametrize("where, fault", BAD_RETURNS)
def test_a_mutator_returning_an_unusable_value_stops_the_run_naming_the_plugin(
        tmp_path, where, fault, reference):
    spy = Spy()
    ran = _train(tmp_path, FaultyMutator(where=where, fault=fault, at_step=5), spy)
    first = ran.err.splitlines()[0]
    assert first.startswith("error: ") and "plugin 'faulty-mutator'" in first, first
    assert f"({where})" in first or f"failed in {where} at step 5" in first, first
    assert "step 5" in first
    _mutator_stopped_the_run(ran, spy, where, reference)


def test_a_mutators_step_post_hook_return_value_is_ignored_as_in_pytorch(tmp_path, reference):
    plugin = FaultyMutator(where="optimizer step post-hook", fault="return-value", at_step=0)
    ran = _train(tmp_path, plugin)
    assert ran.code == 0 and plugin.faults == STEPS
    assert _readable(ran.run_dir)["train/loss"] == reference[0]["train/loss"]


@pytest.mark.parametrize("fault", ["nan", "inf"])
def test_a_mutator_returning_nonfinite_gradients_leaves_a_readable_run(tmp_path, fault,
                                                                       reference):
    """Replacing gradients is what mutators are for: nothing stops the run (nan-guard would),
    the non-finite losses are logged as they are and the checkpoints still load."""
    plugin = FaultyMutator(where="tensor hook", fault=fault, at_step=5)
    ran = _train(tmp_path, plugin)
    assert ran.code == 0, ran.err
    loss = dict(_readable(ran.run_dir)["train/loss"])
    assert [loss[s] for s in range(6)] == [v for _, v in reference[0]["train/loss"][:6]]
    assert all(not np.isfinite(loss[s]) for s in (6, 7))  # kept, not dropped
    before = gl.load(os.path.join(ran.run_dir, "checkpoint-00000004.npz"))["model"]
    assert all(np.array_equal(before[k].numpy(), reference[1][4][k].numpy()) for k in before)
    weights = runs.load_checkpoint(runs.newest_checkpoint(ran.run_dir))["model"]
    assert not all(np.isfinite(w.numpy()).all() for w in weights.values())
    _no_hooks_left(ran)
