"""Property tests (hypothesis) beyond tests/autograd/test_properties.py, which already covers
random shapes and broadcasting of the elementwise and reduction ops against finite
differences:

* random small module stacks (dense and convolutional) against PyTorch: outputs, input and
  parameter gradients, in float64 (skipped cleanly without PyTorch);
* random sequences of hook registrations and removals -- some made by hooks while they run,
  some removing themselves -- over several forward/backward passes: the registries always
  hold exactly the hooks whose handles are live, the hooks fire as in PyTorch (when it is
  installed), and nothing is left once every handle is removed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gradlog as gl
from gradlog import nn
from gradlog.utils.hooks import count_hooks


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


# -- random module stacks against PyTorch --------------------------------------------------------

@st.composite
def dense_stacks(draw):
    """(layer specs, input width): Linear, activations, LayerNorm, BatchNorm1d, softmaxes."""
    width = first = draw(st.integers(1, 6))
    specs = []
    for _ in range(draw(st.integers(1, 5))):
        # NOTE: no LayerNorm over a single feature: its output is the bias, a constant, and a
        # BatchNorm after it multiplies PyTorch's rounding noise by eps**-0.5 per layer (its
        # gradients come out ~1e-9 where the exact value, gradlog's, is 0).
        kinds = ["Linear", "ReLU", "Tanh", "Sigmoid", "GELU", "LeakyReLU", "BatchNorm1d",
                 "Softmax", "LogSoftmax", "Identity"] + (["LayerNorm"] if width > 1 else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "Linear":
            out = draw(st.integers(1, 6))
            specs.append(("Linear", (width, out), {"bias": draw(st.booleans())}))
            width = out
        elif kind in ("LayerNorm", "BatchNorm1d"):
            specs.append((kind, (width,), {}))
        elif kind in ("Softmax", "LogSoftmax"):
            specs.append((kind, (), {"dim": 1}))
        elif kind == "LeakyReLU":
            specs.append((kind, (draw(st.floats(0.01, 0.5)),), {}))
        else:
            specs.append((kind, (), {}))
    return specs, first


@st.composite
def conv_stacks(draw):
    """(layer specs, input channels, input size): Conv2d, pooling, BatchNorm2d, ReLU, then
    Flatten and Linear, with sizes that stay valid."""
    channels = first = draw(st.integers(1, 3))
    size = first_size = draw(st.integers(4, 8))
    specs = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["Conv2d", "MaxPool2d", "AvgPool2d", "BatchNorm2d",
                                     "ReLU"]))
        if kind == "Conv2d":
            k = draw(st.integers(1, min(3, size)))
            stride, padding = draw(st.integers(1, 2)), draw(st.integers(0, k // 2))
            out = draw(st.integers(1, 4))
            specs.append(("Conv2d", (channels, out, k),
                          {"stride": stride, "padding": padding, "bias": draw(st.booleans())}))
            channels, size = out, (size + 2 * padding - k) // stride + 1
        elif kind in ("MaxPool2d", "AvgPool2d") and size >= 2:
            specs.append((kind, (2,), {}))
            size //= 2
        elif kind == "BatchNorm2d":
            specs.append((kind, (channels,), {}))
        elif kind == "ReLU":
            specs.append((kind, (), {}))
    specs += [("Flatten", (), {}), ("Linear", (channels * size * size, 3), {})]
    return specs, first, first_size


def _build(library, specs):
    return library.Sequential(*[getattr(library, kind)(*args, **kw) for kind, args, kw in specs])


def _twins(torch, specs):
    tm = _build(torch.nn, specs).double().train()
    gm = _build(nn, specs).to(gl.float64).train()
    gm.load_state_dict({k: gl.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    return tm, gm


def _compare(torch, tm, gm, x: np.ndarray, seed: int) -> None:
    tx = torch.tensor(x, requires_grad=True)
    gx = gl.tensor(x, requires_grad=True)
    tout, gout = tm(tx), gm(gx)
    np.testing.assert_allclose(gout.detach().numpy(), tout.detach().numpy(), rtol=1e-9,
                               atol=1e-11)
    up = np.random.default_rng(seed).standard_normal(tuple(tout.shape))
    tout.backward(torch.tensor(up))
    gout.backward(gl.tensor(up))
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)
    for (name, tp), gp in zip(tm.named_parameters(), gm.parameters()):
        np.testing.assert_allclose(gp.grad.numpy(), tp.grad.numpy(), rtol=1e-8, atol=1e-10,
                                   err_msg=name)
    for (name, tb), gb in zip(tm.named_buffers(), gm.buffers()):  # running statistics
        np.testing.assert_allclose(gb.numpy(), tb.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=name)


@given(stack=dense_stacks(), batch=st.integers(2, 5), seed=st.integers(0, 2**31))
def test_random_dense_stacks_match_pytorch(stack, batch, seed):
    torch = _torch()
    if torch is None:
        pytest.skip("PyTorch is not installed")
    specs, width = stack
    torch.manual_seed(seed)
    tm, gm = _twins(torch, specs)
    x = np.random.default_rng(seed).standard_normal((batch, width))
    _compare(torch, tm, gm, x, seed + 1)


@given(stack=conv_stacks(), batch=st.integers(2, 3), seed=st.integers(0, 2**31))
def test_random_conv_stacks_match_pytorch(stack, batch, seed):
    torch = _torch()
    if torch is None:
        pytest.skip("PyTorch is not installed")
    specs, channels, size = stack
    torch.manual_seed(seed)
    tm, gm = _twins(torch, specs)
    x = np.random.default_rng(seed).standard_normal((batch, channels, size, size))
    _compare(torch, tm, gm, x, seed + 1)


# -- random hook programs ----------------------------------------------------------------------

KINDS = ("forward_pre", "forward", "backward_pre", "backward", "tensor", "post_acc")
BEHAVIOURS = ("log", "remove_self", "register_forward", "remove_oldest_module_hook")
MODULE_KINDS = KINDS[:4]


class HookProgram:
    """Runs a hook program on a Linear-ReLU-Linear model of one library, logging which hooks
    fire, keeping its own account of the live handles."""

    def __init__(self, library, weights: dict) -> None:
        torch_like = library is not gl
        self.lib = library
        mods = library.nn if torch_like else nn
        self.model = mods.Sequential(mods.Linear(4, 5), mods.ReLU(), mods.Linear(5, 3))
        if torch_like:
            self.model = self.model.double()
            self.model.load_state_dict({k: library.tensor(v) for k, v in weights.items()})
        else:
            self.model = self.model.to(gl.float64)
            self.model.load_state_dict({k: gl.tensor(v) for k, v in weights.items()})
        self.modules = list(self.model)
        self.params = list(self.model.parameters())
        self.live: dict[str, tuple] = {}  # label -> (handle, kind, target)
        self.log: list[str] = []
        self.count = 0

    def register(self, kind: str, target: int, behaviour: str) -> None:
        label = f"h{self.count}:{kind}@{target}"
        self.count += 1
        fired = []

        def act(*_):
            self.log.append(label)
            if fired:
                return None
            fired.append(True)
            if behaviour == "remove_self" and label in self.live:
                self.remove(label)
            elif behaviour == "register_forward":
                self.register("forward", (target + 1) % 3, "log")
            elif behaviour == "remove_oldest_module_hook":
                others = [k for k, v in self.live.items() if k != label and v[1] in MODULE_KINDS]
                if others:
                    self.remove(others[0])
            return None

        m, p = self.modules[target % 3], self.params[target % 4]
        handle = {"forward_pre": lambda: m.register_forward_pre_hook(act),
                  "forward": lambda: m.register_forward_hook(act),
                  "backward_pre": lambda: m.register_full_backward_pre_hook(act),
                  "backward": lambda: m.register_full_backward_hook(act),
                  "tensor": lambda: p.register_hook(act),
                  "post_acc": lambda: p.register_post_accumulate_grad_hook(act)}[kind]()
        self.live[label] = (handle, kind, target)

    def remove(self, label: str) -> None:
        handle, _, _ = self.live.pop(label)
        handle.remove()
        handle.remove()  # idempotent

    def run_pass(self, x: np.ndarray) -> None:
        self.log.append("pass")
        for p in self.params:
            p.grad = None
        inp = self.lib.tensor(x, requires_grad=True)
        self.model(inp).sum().backward()

    def registry_sizes(self) -> list[int]:
        torch_like = self.lib is not gl
        names = (("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
                  "_backward_hooks"))
        sizes = [len(getattr(m, n)) for m in self.modules for n in names]
        tensor_names = (("_backward_hooks", "_post_accumulate_grad_hooks") if torch_like
                        else ("_hooks", "_post_hooks"))
        sizes += [len(getattr(p, n, None) or ()) for p in self.params for n in tensor_names]
        return sizes

    def expected_sizes(self) -> list[int]:
        """The registry sizes the live handles call for."""
        sizes = [0] * (3 * 4 + 4 * 2)
        for _, kind, target in self.live.values():
            if kind in MODULE_KINDS:
                sizes[(target % 3) * 4 + MODULE_KINDS.index(kind)] += 1
            else:
                sizes[12 + (target % 4) * 2 + ("tensor", "post_acc").index(kind)] += 1
        return sizes

    def run(self, actions: list, x: np.ndarray) -> list:
        """Run the actions; after each pass, check the registries against the live handles.
        Returns what was observed (the firing log and the registry sizes)."""
        observed = []
        for action in actions:
            if action[0] == "register":
                self.register(*action[1:])
            elif action[0] == "remove":
                if self.live:
                    self.remove(list(self.live)[action[1] % len(self.live)])
            else:
                self.run_pass(x)
                sizes = self.registry_sizes()
                assert sizes == self.expected_sizes(), (sizes, self.expected_sizes())
                observed.append(sizes)
        for label in list(self.live):
            self.remove(label)
        assert self.registry_sizes() == [0] * 20
        return [*observed, self.log]


ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("register"), st.sampled_from(KINDS), st.integers(0, 11),
              st.sampled_from(BEHAVIOURS)),
    st.tuples(st.just("remove"), st.integers(0, 50)),
    st.tuples(st.just("pass"))), min_size=1, max_size=14)


@given(actions=ACTIONS, seed=st.integers(0, 2**31))
def test_random_hook_programs_keep_registries_consistent_and_fire_as_pytorch(actions, seed):
    rng = np.random.default_rng(seed)
    weights = {"0.weight": rng.standard_normal((5, 4)), "0.bias": rng.standard_normal(5),
               "2.weight": rng.standard_normal((3, 5)), "2.bias": rng.standard_normal(3)}
    x = rng.standard_normal((2, 4))
    actions = [*actions, ("pass",)]
    program = HookProgram(gl, weights)
    ours = program.run(actions, x)
    assert count_hooks(program.model) == 0
    torch = _torch()
    if torch is not None:
        assert ours == HookProgram(torch, weights).run(actions, x)
