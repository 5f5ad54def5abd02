"""Memory: a backward pass without ``retain_graph`` frees every array its graph saved (while the
loss, and so the graph, is still referenced, as in a training loop); registering and removing
hooks, and entering and leaving ``gl.watch``, leave nothing behind. (The resident memory of a
1,000-step training run is measured by the benchmarks: ``python -m benchmarks --only W6``,
``flat_rss``.)"""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np
import pytest
from reliability_helpers import make_batches, setup_model, user_loop

import gradlog as gl
from gradlog import nn
from gradlog.nn import functional as F
from gradlog.plugin import Plugin
from gradlog.testing import MemoryWriter
from gradlog.utils.hooks import count_hooks


def _arrays_in(value, found: list, depth: int = 0) -> None:
    """Every numpy array reachable from ``value`` through tensors, containers and (one level
    of) plain objects."""
    if isinstance(value, np.ndarray):
        found.append(value)
    elif isinstance(value, gl.Tensor):
        found.append(value._data)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _arrays_in(v, found, depth)
    elif isinstance(value, dict):
        for v in value.values():
            _arrays_in(v, found, depth)
    elif depth == 0 and hasattr(value, "__dict__") and not callable(value):
        for v in vars(value).values():
            _arrays_in(v, found, depth + 1)


def _node_state(node) -> list:
    """What a graph node keeps for its backward: its saved tensors and its ctx attributes
    (instance dict and slots). White-box on purpose: these are what must be released."""
    values = [getattr(node, "_saved", None)]
    values += list(getattr(node, "__dict__", {}).values())
    for cls in type(node).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name not in ("_next", "_seq", "_saved", "needs_input_grad", "variable",
                            "__dict__", "__weakref__") and hasattr(node, name):
                values.append(getattr(node, name))
    return values


def _graph_nodes(root) -> list:
    nodes, stack, seen = [], [root], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        stack.extend(n for n, _ in node.next_functions)
    return nodes


class Everything(nn.Module):
    """A stack using the layers and ops whose backward needs more than its inputs: masks,
    indices, statistics, probabilities."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(64, 16)
        self.ln = nn.LayerNorm(16)
        self.drop = nn.Dropout(0.5)
        self.emb = nn.Embedding(5, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, x, tokens):
        h = self.pool(self.bn(self.conv(x)).relu()).flatten(1)
        h = self.drop(F.gelu(self.ln(self.fc(h)))) + self.emb(tokens)
        h = gl.where(h > 0, h, h * 0.1)
        h = h[:, gl.tensor([0, 2, 4, 6, 8, 10, 12, 14])].repeat(1, 2) + h[h.abs() >= 0] \
            .reshape(h.shape).softmax(1)
        return self.out(h.tanh()).sigmoid() * 3


def test_backward_frees_every_array_the_graph_saved():
    gl.manual_seed(0)
    model = Everything().train()
    x, tokens, y = gl.randn(4, 1, 8, 8), gl.tensor([1, 2, 3, 4]), gl.tensor([0, 2, 1, 2])
    out = model(x, tokens)
    loss = F.cross_entropy(out, y, label_smoothing=0.1) + F.mse_loss(out, out.detach() * 0.5)
    kept = {id(a) for a in [x._data, tokens._data, y._data, loss._data]
            + [p._data for p in model.parameters()] + [b._data for b in model.buffers()]}
    saved: list = []
    for node in _graph_nodes(loss.grad_fn):
        if not isinstance(node, gl.autograd.function.AccumulateGrad):
            for value in _node_state(node):
                _arrays_in(value, saved)
    refs = {id(a): (weakref.ref(a), a.shape, a.dtype) for a in saved if id(a) not in kept}
    assert len(refs) > 20  # the walk sees what the graph holds
    del saved, out, value  # (the loop variable would keep the last node's state alive)
    loss.backward()
    gc.collect()
    alive = [(shape, str(dtype)) for ref, shape, dtype in refs.values() if ref() is not None]
    assert loss.grad_fn is not None  # the graph itself is still referenced...
    assert alive == []               # ...but none of its saved arrays


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_full_backward_hooks_keep_no_gradient_alive_after_backward():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    seen = []
    model[0].register_full_backward_hook(lambda m, gi, go: seen.append(go[0].shape))
    model[2].register_full_backward_pre_hook(lambda m, go: seen.append(go[0].shape))
    model.register_full_backward_hook(lambda m, gi, go: None)  # its input needs no grad
    loss = model(gl.randn(4, 8)).sum()
    states = [node.__dict__["state"] for node in _graph_nodes(loss.grad_fn)
              if "state" in getattr(node, "__dict__", {})]  # the hooks' state, on their nodes
    assert len(states) >= 4
    loss.backward()
    assert seen == [(4, 3), (4, 16)]
    assert [s.grad_output for s in states] == [None] * len(states)


def test_backward_with_retain_graph_keeps_them_for_a_second_pass():
    x = gl.randn(4, 8, requires_grad=True)
    y = F.dropout(x, 0.5, training=True).sum()
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2 * first)
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def _growth(cycle, n: int, warmup: int) -> int:
    """How many more memory blocks the interpreter holds after ``n`` more cycles than after
    ``warmup`` (``sys.getallocatedblocks``: every leaked object counts; no tracing overhead)."""
    for _ in range(warmup):
        cycle()
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(n):
        cycle()
    gc.collect()
    return sys.getallocatedblocks() - before


@pytest.mark.slow
def test_a_million_hook_registrations_and_removals_do_not_grow_memory():
    model, opt = setup_model()
    t = gl.ones(3, requires_grad=True)
    registries = [
        lambda: t.register_hook(lambda g: None),
        lambda: t.register_post_accumulate_grad_hook(lambda p: None),
        lambda: model.fc1.register_forward_hook(lambda m, a, o: None),
        lambda: model.fc1.register_forward_pre_hook(lambda m, a: None, prepend=True),
        lambda: model.register_full_backward_hook(lambda m, gi, go: None),
        lambda: opt.register_step_pre_hook(lambda o, a, k: None),
        lambda: nn.modules.module.register_module_forward_hook(lambda m, a, o: None),
        lambda: gl.autograd.register_backward_end_hook(lambda: None),
    ]
    state = {"i": 0}

    def cycle():  # register a hook with one registry, then remove it
        register = registries[state["i"] % len(registries)]
        state["i"] += 1
        register().remove()

    assert _growth(cycle, 1_000_000, warmup=10_000) < 100  # a leak would be ~10**6
    assert count_hooks(model, opt, tensors=[t]) == 0


class Hooky(Plugin):
    """Registers one hook of every kind and logs at every event."""

    name = "hooky"

    def setup(self, run):
        h, m = run.hooks, run.model
        h.register_hook(m.fc1.weight, lambda g: None)
        h.register_post_accumulate_grad_hook(m.fc2.weight, lambda p: None)
        h.register_forward_pre_hook("fc1", lambda mod, a: None)
        h.register_forward_hook("fc2", lambda mod, a, o: None)
        h.register_full_backward_hook("fc2", lambda mod, gi, go: None)
        h.register_step_post_hook(lambda o, a, k: None)

    def on_batch_end(self, run, metrics):
        run.log_scalar("hooky/loss", metrics.get("train/loss", 0.0))


@pytest.mark.slow
def test_a_thousand_watch_cycles_leave_no_hooks_and_no_growth():
    model, opt = setup_model()
    batches = make_batches(1)
    runs: list = []
    from gradlog.autograd import engine
    from gradlog.nn.modules import hooks as module_hooks

    def global_hooks() -> int:  # module-wide hooks and the engine's end-of-backward hooks
        return len(engine._backward_end_hooks) + sum(
            len(getattr(module_hooks, f"global_{kind}_hooks"))
            for kind in ("forward", "forward_pre", "backward", "backward_pre"))

    globals_before = global_hooks()

    def cycle():
        with gl.watch(model, opt, plugins=[Hooky(), "grad-norm"], writer=MemoryWriter()) as run:
            user_loop(run, model, opt, batches)
        assert count_hooks(model, opt) == 0 and run.handles_left() == 0
        if len(runs) < 3:
            runs.append(weakref.ref(run))

    growth = _growth(cycle, 800, warmup=200)
    gc.collect()
    assert all(ref() is None for ref in runs)  # no registry keeps a finished run alive
    assert global_hooks() == globals_before
    assert growth < 400, growth  # a leaked run would be thousands of blocks per cycle
