"""Shared helpers for the built-in plugin tests: small test plugins (a gradient-scaling
mutator, gradient poisoners, a recording observer), the baseline losses, and an event-file
reader for the tests that go through the real SummaryWriter. (A module, not a conftest.py: a
second conftest module would shadow the one tests/plugin imports by name.)"""

from __future__ import annotations

import os

import numpy as np
from click.testing import CliRunner
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event

from gradlog.plugin import Plugin
from gradlog.testing import PluginHarness


class ScaleGrads(Plugin):
    """A clipping-like mutator (order 10): multiplies every gradient by ``factor``."""

    name = "test-scale-grads"
    kind = "mutator"
    order = 10

    def __init__(self, factor: float = 0.5) -> None:
        super().__init__()
        self.factor = factor

    def on_before_optimizer_step(self, run):
        with run.engine.no_grad():
            for p in run.model.parameters():
                if p.grad is not None:
                    p.grad.mul_(self.factor)


class PoisonActivationGrad(Plugin):
    """At the given steps, makes the gradient flowing into module ``layer``'s output
    non-finite (so it spreads to that module's parameters and everything before it)."""

    name = "test-poison"
    kind = "mutator"
    order = 50

    def __init__(self, layer: str, steps, value: float = float("nan")) -> None:
        super().__init__()
        self.layer, self.steps, self.value = layer, steps, value

    def setup(self, run):
        run.hooks.register_forward_hook(self.layer, self._forward)

    def _forward(self, module, args, output):
        run = self.run
        if run.phase == "train" and run.step in self.steps:
            value = self.value
            run.hooks.register_hook(output, lambda g: g * value)

    def on_train_start(self, run):
        self.run = run


class PoisonParamGrad(Plugin):
    """At the given steps, sets element 0 of parameter ``param``'s gradient to ``value``."""

    name = "test-poison-param"
    kind = "mutator"
    order = 50

    def __init__(self, param: str, steps, value: float = float("inf")) -> None:
        super().__init__()
        self.param, self.steps, self.value = param, steps, value

    def setup(self, run):
        self.run = run
        p = dict(run.model.named_parameters())[self.param]
        run.hooks.register_hook(p, self._hook)

    def _hook(self, grad):
        if self.run.step not in self.steps:
            return None
        arr = np.array(self.run.engine.to_numpy(grad))
        arr.reshape(-1)[0] = self.value
        return self.run.engine.from_numpy(arr, like=grad)


class Recorder(Plugin):
    """Records copies of parameters, gradients and optimizer state around each step
    (order 200: after every built-in plugin); with ``count_hooks``, the hooks on the model
    beyond those the run held when training started."""

    name = "test-recorder"
    kind = "observer"
    order = 200

    def __init__(self, count_hooks: bool = False) -> None:
        super().__init__()
        self.before, self.after, self.grads, self.state = {}, {}, {}, {}
        self.hooks_at_start, self.hooks_at_end, self.batches = {}, {}, {}
        self._count = count_hooks

    def _params(self, run):
        return {n: np.array(run.engine.to_numpy(p)) for n, p in run.model.named_parameters()}

    def _opt_state(self, run):
        out = {}
        for n, p in run.model.named_parameters():
            for key, value in run.optimizer.state.get(p, {}).items():
                out[f"{n}:{key}"] = np.array(run.engine.to_numpy(value))
        return out

    def _hooks(self, run):
        return run.engine.count_hooks(run.model)

    def on_train_start(self, run):
        self._framework_hooks = self._hooks(run)  # the run's own (end-of-backward signal)

    def on_batch_start(self, run, batch):
        self.before[run.step] = (self._params(run), self._opt_state(run))
        self.batches[run.step] = np.array(run.engine.to_numpy(batch[0]))
        if self._count:
            self.hooks_at_start[run.step] = self._hooks(run) - self._framework_hooks

    def on_after_backward(self, run):
        self.grads[run.step] = {n: np.array(run.engine.to_numpy(p.grad))
                                for n, p in run.model.named_parameters() if p.grad is not None}

    def on_batch_end(self, run):
        self.after[run.step] = (self._params(run), self._opt_state(run))
        if self._count:
            self.hooks_at_end[run.step] = self._hooks(run) - self._framework_hooks


def same_model(lib, make, seed: int = 0):
    """``make(nn)`` built on ``lib`` (gradlog or torch) with the weights gradlog's
    initialisation gives after ``manual_seed(seed)``: the same model on both engines."""
    import gradlog as gl
    from gradlog.testing import copy_weights
    gl.manual_seed(seed)
    model = make(gl.nn)
    return model if lib is gl else copy_weights(model, make(lib.nn))


def hooks_on(model, optimizer=None) -> int:
    """Hooks registered on ``model`` and ``optimizer``, on either engine."""
    from gradlog.engines import engine_for
    return engine_for(model).count_hooks(model, optimizer)


def baseline_losses(steps: int, epochs: int = 1, **kwargs) -> list[float]:
    """The losses of the harness's run with no plugin of interest (a no-op observer)."""
    return PluginHarness(Recorder, **kwargs).run(steps, epochs).losses


def read_events(log_dir) -> list[Event]:
    names = sorted(n for n in os.listdir(log_dir) if "tfevents" in n)
    return [Event.FromString(raw) for n in names
            for raw in RawEventFileLoader(os.path.join(log_dir, n)).Load()]


def show(name: str) -> str:
    """The output of ``gradlog plugins show NAME``."""
    from gradlog.cli import main
    result = CliRunner().invoke(main, ["plugins", "show", name])
    assert result.exit_code == 0, result.output
    return result.output
