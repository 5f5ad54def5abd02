"""Activation checkpointing under the histogram plugin: the recomputation of a checkpointed
region during backward is not logged again; each activation is logged once per logging step
with the values of the forward pass, on both engines and with both checkpoint variants."""

from __future__ import annotations

import numpy as np
import pytest

import gradlog as gl
from gradlog.plugin.outputs import call_name
from gradlog.testing import MemoryWriter

torch = pytest.importorskip("torch")


def _model(lib, checkpoint, reentrant):
    nn = lib.nn

    class Checkpointed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc0 = nn.Linear(5, 5)  # (the region's input requires grad, as reentrant needs)
            self.fc1 = nn.Linear(5, 8)
            self.act = nn.Tanh()
            self.fc2 = nn.Linear(8, 8)
            self.head = nn.Linear(8, 2)

        def block(self, x):
            return self.act(self.fc2(self.act(self.fc1(x))))

        def forward(self, x):
            return self.head(checkpoint(self.block, self.fc0(x), use_reentrant=reentrant))
    return Checkpointed()


def _checkpoint(lib):
    return torch.utils.checkpoint.checkpoint if lib is torch else gl.utils.checkpoint.checkpoint


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("lib_name", ["torch", "gradlog"])
def test_checkpointed_activations_are_logged_once_per_step_with_the_forwards_values(
        lib_name, reentrant):
    lib = torch if lib_name == "torch" else gl
    lib.manual_seed(0)
    model = _model(lib, _checkpoint(lib), reentrant)
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(3)]
    seen: list[tuple[int, str, np.ndarray]] = []  # every call, the recomputation's too
    calls = {"fc1": 0, "act": 0}

    def spy(name):
        def hook(module, args, output):
            seen.append((name, calls[name], np.array(output.detach().numpy())))
            calls[name] += 1
        return hook
    model.fc1.register_forward_hook(spy("fc1"))
    model.act.register_forward_hook(spy("act"))
    writer = MemoryWriter()
    expected: dict[tuple[str, int], np.ndarray] = {}
    with gl.watch(model, opt, writer=writer, strict=True,
                  plugins=["histogram:every=1,kinds=[\"activation\"]"]):
        for step, x in enumerate(xs):
            calls.update(fc1=0, act=0)
            w = {n: torch.tensor(np.array(p.detach().numpy()), dtype=torch.float64)
                 for n, p in model.named_parameters()}
            # the forward's values, computed independently in float64
            h0 = torch.from_numpy(x).double() @ w["fc0.weight"].T + w["fc0.bias"]
            h1 = h0 @ w["fc1.weight"].T + w["fc1.bias"]
            h2 = torch.tanh(torch.tanh(h1) @ w["fc2.weight"].T + w["fc2.bias"])
            expected.update({("fc1", step): h1, ("act", step): torch.tanh(h1),
                             ("act-1", step): h2})
            opt.zero_grad()
            model(lib.tensor(x)).sum().backward()
            opt.step()
    # the module hooks fired again in the recomputation (the pattern is real) ...
    assert max(call for name, call, _ in seen if name == "fc1") >= 1
    # ... but each activation is logged once per step, with the forward's values
    for name in ("fc1", "act", "act-1"):
        series = writer.series("histogram", f"histogram/activation/{name}")
        assert series.steps == [0, 1, 2], name
        for step, values in zip(series.steps, series.values):
            np.testing.assert_allclose(values, expected[(name, step)].numpy().reshape(-1),
                                       rtol=1e-5, atol=1e-6)
    assert "histogram/activation/act-2" not in writer.tags()
    assert call_name("act", 2) == "act-2"
