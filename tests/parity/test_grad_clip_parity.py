"""grad-clip against PyTorch on the same gradient arrays: norm mode against
``torch.nn.utils.clip_grad_norm_`` (norm types 2, 1, inf, 0.5 and 3; the logged pre-clip norm
against its return value), value mode against ``clip_grad_value_``, and AGC against the
unit-wise rule written with torch operations."""

from __future__ import annotations

import numpy as np
import pytest
from gradlog_plugins.grad_clip import GradClip

from gradlog.plugin import Plugin
from gradlog.testing import PluginHarness

torch = pytest.importorskip("torch")


class SetGrads(Plugin):
    """Replaces every gradient by prescribed arrays just before grad-clip (order 10) runs."""

    name = "test-set-grads"
    kind = "mutator"
    order = 5

    def __init__(self, scale: float, seed: int = 0) -> None:
        super().__init__()
        self.scale, self.seed = scale, seed
        self.given: list[dict] = []

    def on_before_optimizer_step(self, run):
        rng = np.random.default_rng(self.seed + run.step)
        given = {}
        with run.engine.no_grad():
            for name, p in run.model.named_parameters():
                g = (rng.standard_normal(tuple(p.shape)) * self.scale).astype(np.float32)
                p.grad.copy_(run.engine.from_numpy(g))
                given[name] = g
        self.given.append(given)


class FinalGrads(Plugin):
    name = "test-final-grads"
    kind = "observer"
    order = 100

    def __init__(self) -> None:
        super().__init__()
        self.final: list[dict] = []
        self.weights: list[dict] = []

    def on_before_optimizer_step(self, run):
        named = list(run.model.named_parameters())
        to_numpy = run.engine.to_numpy
        self.final.append({n: to_numpy(p.grad).copy() for n, p in named})
        self.weights.append({n: to_numpy(p).copy() for n, p in named})


def run_plugin(scale: float, steps: int = 2, **options):
    given, final = SetGrads(scale), FinalGrads()
    h = PluginHarness(GradClip, plugins=[given, final], **options).run(steps)
    assert h.handles_left() == 0
    return h, given.given, final


def torch_params(grads: dict) -> list:
    params = []
    for g in grads.values():
        p = torch.nn.Parameter(torch.zeros(g.shape))
        p.grad = torch.tensor(g.copy())
        params.append(p)
    return params


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 0.5, 3.0])
@pytest.mark.parametrize("scale, max_norm", [(1.0, 0.5), (1e-3, 10.0)])
def test_norm_mode_matches_clip_grad_norm(norm_type, scale, max_norm):
    h, given, spy = run_plugin(scale, mode="norm", max_norm=max_norm, norm_type=norm_type)
    before = h.scalars("grad-clip/norm_before").values
    for step, grads in enumerate(given):
        params = torch_params(grads)
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
        np.testing.assert_allclose(before[step], total.item(), rtol=1e-5)
        for (name, ours), theirs in zip(spy.final[step].items(), params):
            assert ours.dtype == np.float32
            np.testing.assert_allclose(ours, theirs.grad.numpy(), rtol=1e-5, atol=1e-9,
                                       err_msg=name)
        clipped = max_norm / (total.item() + 1e-6) < 1
        assert h.scalars("grad-clip/clip_fraction").values[step] == (1.0 if clipped else 0.0)


def test_value_mode_matches_clip_grad_value():
    h, given, spy = run_plugin(1.0, mode="value", clip_value=0.7)
    for step, grads in enumerate(given):
        params = torch_params(grads)
        torch.nn.utils.clip_grad_value_(params, 0.7)
        for ours, theirs in zip(spy.final[step].values(), params):
            np.testing.assert_array_equal(ours, theirs.grad.numpy())


def agc_torch(weight, grad, clipping=0.01, eps=1e-3):
    """The unit-wise rule in torch: per output unit for matrices and kernels, whole vectors."""
    w, g = torch.tensor(weight), torch.tensor(grad)
    dims = tuple(range(1, w.ndim)) if w.ndim > 1 else None
    keep = dims is not None
    w_norm = torch.linalg.vector_norm(w, dim=dims, keepdim=keep).clamp(min=eps)
    g_norm = torch.linalg.vector_norm(g, dim=dims, keepdim=keep)
    max_norm = w_norm * clipping
    clipped = g * (max_norm / g_norm.clamp(min=1e-6))
    return torch.where(g_norm < max_norm, g, clipped).numpy()


def test_agc_matches_the_unit_wise_rule_in_torch():
    h, given, spy = run_plugin(0.1, mode="agc", agc_skip_final=False)
    for step, grads in enumerate(given):
        for name, g in grads.items():
            expected = agc_torch(spy.weights[step][name], g)
            np.testing.assert_allclose(spy.final[step][name], expected, rtol=1e-5, atol=1e-9,
                                       err_msg=name)
    assert h.scalars("grad-clip/unit_clip_frac").values[0] > 0
