"""Copies of a watched model (copy.deepcopy, AveragedModel as an EMA, torch.save/torch.load)
work during the run and are not watched: their hooks do nothing and hold no reference to the
run, and what the run logs is unchanged by them."""

from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest
from patterns_helpers import SmallCNN, batches, sgd_steps

import gradlog as gl
from gradlog.testing import MemoryWriter
from gradlog.utils.run_hooks import InertHook, RunHook

torch = pytest.importorskip("torch")

PLUGINS = ["histogram:every=1", "grad-norm:every=1"]


def _hooks(model):
    """Every hook object on the modules and parameters of ``model``."""
    found = [h for m in model.modules() for registry in
             (m._forward_pre_hooks, m._forward_hooks, m._backward_hooks, m._backward_pre_hooks)
             for h in registry.values()]
    return found + [h for p in model.parameters()
                    for h in (p._post_accumulate_grad_hooks or {}).values()]


def _copies(model):
    saved = io.BytesIO()
    torch.save(model, saved)
    saved.seek(0)
    return {"deepcopy": copy.deepcopy(model),
            "torch.load": torch.load(saved, weights_only=False),
            "AveragedModel": torch.optim.swa_utils.AveragedModel(model).module}


def test_copies_of_a_watched_model_are_unwatched_and_leave_the_run_alone():
    torch.manual_seed(0)
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(4)
    writer = MemoryWriter()
    with gl.watch(model, opt, writer=writer, strict=True, plugins=PLUGINS) as run:
        sgd_steps(model, opt, data[:2])
        assert any(isinstance(h, RunHook) for h in _hooks(model))  # the run's, on the model
        for how, c in _copies(model).items():
            assert not any(isinstance(h, RunHook) for h in _hooks(c)), how
            assert all(isinstance(h, InertHook) for h in _hooks(c)), how
            pickle.dumps(c)  # nothing of the run in it
            records, step = len(writer.records), run.step
            copy_opt = torch.optim.SGD(c.parameters(), lr=0.1)
            sgd_steps(c, copy_opt, data[2:3])  # the copy trains: nothing is logged
            assert (len(writer.records), run.step) == (records, step), how
        grads = []
        for x, y in data[2:]:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            grads.append({n: p.grad.double().clone() for n, p in model.named_parameters()})
            opt.step()
    # the run goes on logging the original's values (grad-norm against float64 norms)
    norms = writer.series("scalar", "grad-norm/conv1")
    assert norms.steps == [0, 1, 2, 3]
    for k, step in enumerate((2, 3)):
        expected = torch.linalg.vector_norm(torch.cat([grads[k]["conv1.weight"].reshape(-1),
                                                       grads[k]["conv1.bias"]]))
        assert norms.values[step] == pytest.approx(float(expected), rel=1e-6)


def test_an_ema_of_a_watched_model_averages_its_weights():
    torch.manual_seed(0)
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    decay = 0.9
    with gl.watch(model, opt, writer=MemoryWriter(), strict=True, plugins=PLUGINS):
        ema = torch.optim.swa_utils.AveragedModel(
            model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(decay))
        expected: dict = {}
        for x, y in batches(3):
            sgd_steps(model, opt, [(x, y)])
            ema.update_parameters(model)
            for n, p in model.named_parameters():  # (the first update copies the weights)
                now = p.detach().double()
                expected[n] = decay * expected[n] + (1 - decay) * now if expected.get(
                    n) is not None else now.clone()
        ema(batches(1)[0][0])  # its forward runs, unwatched
    for n, p in ema.module.named_parameters():
        np.testing.assert_allclose(p.detach().numpy(), expected[n].numpy(), rtol=1e-5,
                                   atol=1e-7)


class KeepsItsHooks(torch.optim.SGD):
    """An optimizer whose copies keep everything in its ``__dict__``, hook registries too
    (``object``'s own ``__getstate__``; torch's drops them)."""

    def __getstate__(self):
        return dict(self.__dict__)

    def __setstate__(self, state):
        self.__dict__.update(state)


@pytest.mark.parametrize("optimizer", [torch.optim.SGD, KeepsItsHooks])
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copies_of_a_watched_optimizer_step_without_logging_into_the_run(optimizer, how):
    torch.manual_seed(0)
    model = SmallCNN()
    opt = optimizer(model.parameters(), lr=0.1)
    data = batches(3)
    writer = MemoryWriter()
    with gl.watch(model, opt, writer=writer, strict=True, plugins=PLUGINS) as run:
        sgd_steps(model, opt, data[:2])
        hooks = [*opt._optimizer_step_pre_hooks.values(),
                 *opt._optimizer_step_post_hooks.values()]
        assert len(hooks) == 2 and all(isinstance(h, RunHook) for h in hooks)
        c = copy.deepcopy(opt) if how == "deepcopy" else pickle.loads(pickle.dumps(opt))
        copied = [*c._optimizer_step_pre_hooks.values(), *c._optimizer_step_post_hooks.values()]
        assert all(isinstance(h, InertHook) for h in copied)
        records, step = len(writer.records), run.step
        params = [p for group in c.param_groups for p in group["params"]]
        for p in params:
            p.grad = torch.ones_like(p)
        before = [p.detach().clone() for p in params]
        c.step()  # the copy steps its own parameters: nothing is logged, the run stays
        assert all(torch.allclose(p, b - 0.1) for p, b in zip(params, before, strict=True))
        assert (len(writer.records), run.step) == (records, step)
        sgd_steps(model, opt, data[2:])
    assert writer.series("scalar", "grad-norm/conv1").steps == [0, 1, 2]
