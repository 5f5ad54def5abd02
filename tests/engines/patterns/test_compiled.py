"""A torch.compile'd model under gl.watch: the user's module names, hooks that compiled code
does not trace (no graph break on steps without due plugins, no writable-array warning), and
the values an eager float64 computation gives."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from patterns_helpers import SmallCNN, batches, float64_copy, sgd_steps

import gradlog as gl
from gradlog.testing import MemoryWriter

torch = pytest.importorskip("torch")
dynamo = pytest.importorskip("torch._dynamo")
counters = dynamo.utils.counters


@pytest.fixture
def fresh_dynamo():
    dynamo.reset()
    counters.clear()
    yield
    dynamo.reset()


def _graph_breaks() -> int:
    return sum(counters["graph_break"].values())


def _watched_run(warm_up: int, steps: int = 6, every: int = 2):
    torch.manual_seed(0)
    model = SmallCNN()
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(warm_up + steps)
    sgd_steps(model, opt, data[:warm_up], call=compiled)
    writer, inputs, weights = MemoryWriter(), [], []
    probe = torch.randn(2, 1, 6, 6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gl.watch(compiled, opt, writer=writer, strict=True,
                      plugins=[f"histogram:every={every}", f"grad-norm:every={every}",
                               f"gradcam:layer=conv2,every={every}"],
                      probe_sets={"probe": {"images": probe}}):
            for x, y in data[warm_up:]:
                inputs.append(x)
                weights.append(float64_copy(model))
                sgd_steps(model, opt, [(x, y)], call=compiled)
    return writer, inputs, weights, caught


@pytest.mark.parametrize("warm_up", [0, 2])
def test_a_compiled_model_is_logged_under_its_own_names_with_eager_float64_values(
        fresh_dynamo, warm_up):
    # warm_up=2: compiled (without gradlog's hooks) before gl.watch; compiled code ignores
    # hooks added later, so without the eager logging steps no activation would be logged
    writer, inputs, weights, caught = _watched_run(warm_up)
    tags = writer.tags()
    assert "grad-norm/conv1" in tags and "gradcam/conv2" in tags
    assert not [t for t in tags if "_orig_mod" in t]
    relu2 = writer.series("histogram", "histogram/activation/relu2")
    assert relu2.steps == [0, 2, 4]
    for step, values in zip(relu2.steps, relu2.values):
        ref = weights[step]
        x = inputs[step].double()
        expected = ref.relu2(ref.conv2(ref.relu1(ref.conv1(x))))
        np.testing.assert_allclose(values, expected.detach().numpy().reshape(-1), rtol=1e-5,
                                   atol=1e-6)
    assert not [w for w in caught if "not writable" in str(w.message)]


def test_steps_without_due_plugins_run_one_graph_without_breaks(fresh_dynamo):
    writer, *_ = _watched_run(warm_up=0, steps=6, every=2)
    # the logging steps (0, 2, 4) run eagerly; the others, one compiled graph, no break
    assert _graph_breaks() == 0
    assert counters["stats"]["unique_graphs"] == 1
    assert writer.series("histogram", "histogram/activation/conv1").steps == [0, 2, 4]


def test_compiled_bare_model_has_no_graph_break(fresh_dynamo):
    torch.manual_seed(0)
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sgd_steps(model, opt, batches(6), call=torch.compile(model, backend="aot_eager"))
    assert _graph_breaks() == 0 and counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("wrap", [
    lambda m: torch.compile(torch.nn.DataParallel(m), backend="aot_eager"),
    lambda m: torch.nn.DataParallel(torch.compile(m, backend="aot_eager")),
], ids=["compile(DataParallel)", "DataParallel(compile)"])
def test_a_compiled_model_inside_or_around_a_data_parallel_wrapper(fresh_dynamo, wrap):
    torch.manual_seed(0)
    model = SmallCNN()
    wrapped = wrap(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    writer = MemoryWriter()
    with gl.watch(wrapped, opt, writer=writer, strict=True, plugins=["histogram:every=2"]):
        sgd_steps(model, opt, batches(5), call=wrapped)
    assert writer.series("histogram", "histogram/activation/relu1").steps == [0, 2, 4]
    assert _graph_breaks() == 0 and counters["stats"]["unique_graphs"] == 1


def test_a_compiled_forward_runs_eagerly_exactly_while_a_run_hook_is_on_a_module(fresh_dynamo):
    from gradlog.engines.torch import TorchEngine
    from gradlog.utils.run_hooks import RunHook
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    compiled = torch.compile(model, backend="aot_eager")
    engine = TorchEngine()
    root = engine.register_root_hook(compiled, RunHook(lambda module, args: None))
    x = torch.randn(4, 3)
    compiled(x)
    eager_calls, run_calls = [], []
    # a plain hook added after compiling: compiled code ignores it, an eager forward calls it
    model[0].register_forward_hook(lambda *a: eager_calls.append(1))
    compiled(x)
    assert eager_calls == []
    handle = engine.register_hook(model[2], "register_forward_hook",
                                  RunHook(lambda *a: run_calls.append(1)))
    second = engine.register_hook(model[0], "register_forward_pre_hook", RunHook(lambda *a: None))
    compiled(x)
    assert (len(eager_calls), len(run_calls)) == (1, 1)
    handle.remove()
    compiled(x)  # one of the run's hooks is still on
    assert (len(eager_calls), len(run_calls)) == (2, 1)
    second.remove()
    second.remove()  # (idempotent, as torch's handles)
    compiled(x)
    compiled(x)
    assert (len(eager_calls), len(run_calls)) == (2, 1)
    root.remove()
