"""Runs on PyTorch models: two watched models (a small GAN) fire only their own plugins, the
same run logs the same values on both engines (every tag of every built-in plugin), observers
leave a torch trajectory bit-identical, a run without an optimizer counts steps by backward
passes, and tensors of other dtypes are logged with their values."""

from __future__ import annotations

import numpy as np
import pytest
from gradlog_plugins.activation_stats import ActivationStats
from gradlog_plugins.adversarial import Adversarial
from gradlog_plugins.grad_clip import GradClip
from gradlog_plugins.grad_noise import GradNoise
from gradlog_plugins.grad_norm import GradNorm
from gradlog_plugins.gradcam import GradCAM
from gradlog_plugins.histogram import Histogram
from gradlog_plugins.lr_monitor import LRMonitor
from gradlog_plugins.nan_guard import NanGuard

import gradlog as gl
from gradlog.plugin import Plugin
from gradlog.testing import MemoryWriter, PluginHarness

torch = pytest.importorskip("torch")


class Backwards(Plugin):
    """Counts the on_after_backward events of its run, with the step each came at."""

    name = "test-backwards"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def on_after_backward(self, run):
        self.seen.append(run.step)


@pytest.mark.parametrize("lib_name", ["gradlog", "torch"])
@pytest.mark.parametrize("freeze_d", [True, False])
def test_two_watched_models_in_a_gan_fire_only_their_own_plugins(lib_name, freeze_d):
    lib = gl if lib_name == "gradlog" else torch
    nn = lib.nn
    lib.manual_seed(0)
    G = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 3))
    D = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
    opt_g = lib.optim.SGD(G.parameters(), lr=0.01)
    opt_d = lib.optim.SGD(D.parameters(), lr=0.01)
    on_g, on_d = Backwards(), Backwards()
    steps = 3
    with gl.watch(G, opt_g, plugins=[on_g, Histogram(every=1)], writer=MemoryWriter()), \
            gl.watch(D, opt_d, plugins=[on_d], writer=MemoryWriter()):
        for _ in range(steps):
            z, real = lib.randn(4, 2), lib.randn(4, 3)
            opt_d.zero_grad()
            (D(G(z).detach()).mean() - D(real).mean()).backward()  # D's parameters only
            opt_d.step()
            for p in D.parameters():
                p.requires_grad_(not freeze_d)
            opt_g.zero_grad()
            (-D(G(z)).mean()).backward()  # G's, and D's unless frozen
            opt_g.step()
            for p in D.parameters():
                p.requires_grad_(True)
    # once per step of each run's own optimizer: the gradient G's backward leaves in D (never
    # applied) reaches no event of D's run
    assert on_g.seen == list(range(steps))
    assert on_d.seen == list(range(steps))


class PoisonAtStep2(Plugin):
    """Makes one gradient element infinite at step 2, before nan-guard looks (order -1)."""

    name = "test-poison"
    kind = "mutator"
    order = -1

    def on_before_optimizer_step(self, run):
        if run.step == 2:
            with run.engine.no_grad():
                run.model.get_parameter("7.bias").grad[0] = float("inf")


def _plugins():
    """Every built-in plugin, configured so that both engines compute the same numbers (no
    draws from a plugin's generator: the engines' random streams differ)."""
    return [
        (NanGuard, {"plugins": [PoisonAtStep2()]}), (GradClip, {"max_norm": 0.05}),
        (GradClip, {"mode": "agc"}),
        (GradNoise, {"eta": 0.0}), (Adversarial, {"mode": "pgd", "random_start": False,
                                                  "log_every": 1, "eval_size": 16,
                                                  "eval_steps": 3}),
        (Histogram, {"every": 1}), (GradNorm, {"every": 1}),
        (GradCAM, {"every": 2, "discrimination": "every"}), (LRMonitor, {}),
        (ActivationStats, {"every": 1}),
    ]


@pytest.mark.parametrize("plugin, options", _plugins(),
                         ids=lambda v: v.name if isinstance(v, type) else None)
@pytest.mark.filterwarnings("ignore:nan-guard")
def test_the_same_run_logs_the_same_values_on_both_engines(plugin, options):
    def run(engine):
        opts = {k: ([type(p)() for p in v] if k == "plugins" else v) for k, v in options.items()}
        return PluginHarness(plugin, engine=engine, **opts).run(steps=4, epochs=2)
    runs = {e: run(e) for e in ("gradlog", "torch")}
    ours, theirs = runs["gradlog"].writer.records, runs["torch"].writer.records
    assert runs["gradlog"].tags() == runs["torch"].tags() and ours
    assert [(k, t, s) for k, t, s, _ in ours] == [(k, t, s) for k, t, s, _ in theirs]
    for (kind, tag, step, a), (_, _, _, b) in zip(ours, theirs):
        where = f"{kind} {tag} at step {step}"
        if kind == "text":
            assert a == b, where
        else:
            np.testing.assert_allclose(np.asarray(b, np.float64), np.asarray(a, np.float64),
                                       rtol=2e-4, atol=2e-5, err_msg=where)
    np.testing.assert_allclose(runs["torch"].losses, runs["gradlog"].losses, rtol=1e-5)


def _torch_training(plugins, steps=6):
    """A torch loop under gl.watch: dropout (global random stream), BatchNorm, momentum."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Dropout(0.3), nn.Flatten(), nn.Linear(4 * 8 * 8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.rand(8, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    probe = {"probe": {"images": data[:4]}}
    losses = []
    with gl.watch(model, opt, plugins=plugins, writer=MemoryWriter(), probe_sets=probe,
                  strict=True) as run:
        for k in range(steps):
            x, y = run.batch(data, torch.arange(8) % 3)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            run.log_scalar("train/loss", loss)
            losses.append(loss.item())
            if k == steps // 2:
                run.epoch_end()
    return losses, model.state_dict(), torch.get_rng_state()


def test_observers_leave_a_torch_trajectory_bit_identical():
    plain = _torch_training([])
    watched = _torch_training([Histogram(every=1), GradNorm(every=1), LRMonitor(),
                               GradCAM(every=1), ActivationStats(every=1)])
    assert watched[0] == plain[0]  # bit-identical losses
    for name, value in plain[1].items():
        assert torch.equal(watched[1][name], value), name  # weights and BatchNorm buffers
    assert torch.equal(watched[2], plain[2])  # torch's global random stream


@pytest.mark.parametrize("lib_name", ["gradlog", "torch"])
def test_without_an_optimizer_steps_are_counted_by_backward_passes(lib_name):
    lib = gl if lib_name == "gradlog" else torch
    lib.manual_seed(0)
    model = lib.nn.Linear(3, 2)
    writer = MemoryWriter()
    with pytest.warns(UserWarning, match=r"without an optimizer: each backward pass .* counts "
                                         r"as a step.*\(plugins that use them: histogram, "
                                         r"grad-norm\)"):
        run = gl.watch(model, plugins=[Histogram(every=2), GradNorm(every=1)], writer=writer)
    with run:
        for _ in range(5):
            model(lib.randn(4, 3)).pow(2).mean().backward()
            run.log_scalar("train/loss", 1.0)
            model.zero_grad()
    assert run.step == 5
    assert writer.series("scalar", "train/loss").steps == [0, 1, 2, 3, 4]
    assert writer.series("scalar", "grad-norm/global").steps == [0, 1, 2, 3, 4]
    assert writer.series("histogram", "histogram/grad_raw/weight").steps == [0, 2, 4]
    assert writer.series("histogram", "histogram/weight/weight").steps == [0, 2, 4]


@pytest.mark.parametrize("dtype", ["float64", "bfloat16", "float16"])
def test_a_model_of_another_dtype_is_logged_with_its_values(dtype):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(getattr(torch, dtype))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    writer, grads = MemoryWriter(), []
    with gl.watch(model, opt, plugins=[Histogram(every=1), GradNorm(every=1)],
                  writer=writer, strict=True):
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(5, 4).to(model.weight.dtype)).sum().backward()
            grads.append(model.weight.grad.detach().to(torch.float64).numpy().copy())
            opt.step()
    logged = writer.series("histogram", "histogram/grad_raw/weight").values
    for got, want in zip(logged, grads):
        np.testing.assert_array_equal(got, want.reshape(-1))  # exactly, widened
    norms = writer.series("scalar", "grad-norm/global").values
    for norm, grad in zip(norms, grads):
        bias = 5.0  # d(sum)/d(bias) is the batch size for each of the 3 outputs
        assert norm == pytest.approx(np.sqrt((grad ** 2).sum() + 3 * bias ** 2), rel=1e-6)
