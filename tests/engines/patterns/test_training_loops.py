"""PyTorch training as users write it, under ``gl.watch``: what is logged for each pattern is
read back from the run's event files and compared with torch's own computation in float64 of
the gradient the optimizer applied (AMP with GradScaler and a skipped step, bf16 autocast,
gradient accumulation, two models with two optimizers, ``optimizer.step(closure)`` and LBFGS,
batches of any structure)."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradlog_plugins.grad_clip import GradClip  # noqa: E402
from gradlog_plugins.grad_norm import GradNorm  # noqa: E402
from gradlog_plugins.histogram import Histogram  # noqa: E402
from patterns_helpers import (  # noqa: E402
    GRAD_TAGS,
    Logged,
    assert_histogram_of,
    global_norm,
    grads64,
    regression_batches,
    small_mlp,
)

import gradlog as gl  # noqa: E402
from gradlog.plugin import Plugin, PluginError  # noqa: E402
from gradlog.testing import MemoryWriter  # noqa: E402

F = torch.nn.functional


def _gradient_plugins(every: int = 1, per_rank: bool = False) -> list:
    return [GradNorm(every=every, per_layer=False, per_rank=per_rank),
            Histogram(every=every, kinds=["grad_raw", "grad", "weight", "activation"],
                      per_rank=per_rank)]


def _assert_gradients_logged(logged: Logged, expected: dict[int, dict[str, np.ndarray]],
                             raw: dict[int, dict[str, np.ndarray]] | None = None) -> None:
    """grad-norm/global and the grad_raw / grad histograms: one point per step of
    ``expected`` (step -> the gradients applied), equal to them (raw: to ``raw``)."""
    raw = expected if raw is None else raw
    norms = logged.scalars("grad-norm/global")
    assert [s for s, _ in norms] == sorted(raw)
    for step, value in norms:
        assert math.isfinite(value)
        assert value == pytest.approx(global_norm(raw[step]), rel=1e-5)
    for name in GRAD_TAGS:
        for kind, source in (("grad", expected), ("grad_raw", raw)):
            points = logged.histograms(f"histogram/{kind}/{name}")
            assert [s for s, _ in points] == sorted(source), (kind, name)
            for step, histogram in points:
                assert_histogram_of(histogram, source[step][name])


# -- AMP ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("recipe", ["scaler.step", "unscale_ then clip"])
def test_fp16_autocast_with_grad_scaler_logs_unscaled_gradients_and_counts_a_skipped_step(
        tmp_path, recipe):
    model = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    applied: dict[int, dict[str, np.ndarray]] = {}
    skipped_at = 2
    with gl.watch(model, opt, logdir=str(tmp_path), plugins=_gradient_plugins(per_rank=True),
                  scaler=scaler, strict=True) as run:
        for step, (x, y) in enumerate(regression_batches(6)):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                out = model(x)
            loss = F.mse_loss(out.float(), y)
            if step == skipped_at:  # inf in every gradient: the scaler skips this step
                loss = loss * math.inf
            scaler.scale(loss).backward()
            if recipe == "scaler.step":  # the gradient applied: .grad / scale, in float64
                scale = scaler.get_scale()
                unscaled = {n: g / scale for n, g in grads64(model).items()}
            else:
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
                unscaled = grads64(model)
            if step != skipped_at:
                applied[step] = unscaled
            scaler.step(opt)
            scaler.update()
    assert run.step == 6 and run.amp_skipped_steps == 1
    logged = Logged(tmp_path)
    _assert_gradients_logged(logged, applied)  # nothing at step 2, nothing loss-scaled
    assert logged.scalars("amp/skipped_steps") == [(skipped_at, 1.0)]
    assert max(v for _, v in logged.scalars("grad-norm/global")) < 10.0  # (scale: 65536)
    if recipe == "scaler.step":  # the per-rank values, read during backward, unscaled too
        _assert_gradients_logged(Logged(tmp_path / "rank0"), {}, raw=applied)


def test_bf16_autocast_logs_the_float32_gradients_applied(tmp_path):
    model = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    applied = {}
    with gl.watch(model, opt, logdir=str(tmp_path), plugins=_gradient_plugins(), strict=True):
        for step, (x, y) in enumerate(regression_batches(3)):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            F.mse_loss(out.float(), y).backward()
            applied[step] = grads64(model)
            opt.step()
    _assert_gradients_logged(Logged(tmp_path), applied)


# -- gradient accumulation --------------------------------------------------------------------
@pytest.mark.parametrize("announced", [False, True])
@pytest.mark.parametrize("every", [1, 2])
def test_gradient_accumulation_logs_the_accumulated_gradient_once_per_step(tmp_path, every,
                                                                           announced):
    model = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = regression_batches(5 * 4)
    applied, weights, activations = {}, {}, {}
    with gl.watch(model, opt, logdir=str(tmp_path), plugins=_gradient_plugins(every),
                  strict=True) as run:
        for step in range(5):
            opt.zero_grad()
            weights[step] = {n: p.detach().double().numpy().copy()
                             for n, p in model.named_parameters()}
            for micro, (x, y) in enumerate(data[4 * step:4 * step + 4]):
                if announced:
                    x, y = run.batch(x, y)
                if micro == 0:  # the activation logged: the first micro-batch's, in float64
                    w, b = (torch.from_numpy(weights[step][k]) for k in ("0.weight", "0.bias"))
                    activations[step] = torch.relu(x.double() @ w.T + b).numpy()
                (F.mse_loss(model(x), y) / 4).backward()
            applied[step] = grads64(model)
            opt.step()
    due = [s for s in range(5) if s % every == 0]
    logged = Logged(tmp_path)
    _assert_gradients_logged(logged, {s: applied[s] for s in due})
    for name in GRAD_TAGS:
        points = logged.histograms(f"histogram/weight/{name}")
        assert [s for s, _ in points] == due
        for step, histogram in points:
            assert_histogram_of(histogram, weights[step][name])
    points = logged.histograms("histogram/activation/1")
    assert [s for s, _ in points] == due  # once per logging step: micro-batch 0
    for step, histogram in points:
        assert_histogram_of(histogram, activations[step])


# -- two models, two optimizers -----------------------------------------------------------------
def test_in_a_gan_each_run_logs_only_the_gradients_its_own_optimizer_applies(tmp_path):
    torch.manual_seed(0)
    G = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    D = small_mlp(seed=1)
    opt_g = torch.optim.SGD(G.parameters(), lr=0.05)
    opt_d = torch.optim.SGD(D.parameters(), lr=0.05)
    applied_g, applied_d = {}, {}
    with gl.watch(G, opt_g, logdir=str(tmp_path / "G"), plugins=_gradient_plugins(),
                  strict=True), \
            gl.watch(D, opt_d, logdir=str(tmp_path / "D"), plugins=_gradient_plugins(),
                     strict=True):
        for step in range(4):
            z, real = torch.randn(5, 2), torch.randn(5, 4)
            opt_d.zero_grad()
            (D(G(z).detach()).mean() - D(real).mean()).backward()
            applied_d[step] = grads64(D)
            opt_d.step()
            opt_g.zero_grad()
            (-D(G(z)).mean()).backward()  # leaves a gradient in D that is never applied
            applied_g[step] = grads64(G)
            opt_g.step()
    _assert_gradients_logged(Logged(tmp_path / "D"), applied_d)
    _assert_gradients_logged(Logged(tmp_path / "G"), applied_g)


# -- closures -----------------------------------------------------------------------------------
def test_a_closure_step_logs_its_own_gradient_and_grad_clip_clips_what_is_applied(tmp_path):
    model = small_mlp()
    lr, max_norm = 0.5, 0.05
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    computed, moved = {}, {}
    with gl.watch(model, opt, logdir=str(tmp_path), strict=True,
                  plugins=[GradClip(max_norm=max_norm), *_gradient_plugins()]) as run:
        for step, (x, y) in enumerate(regression_batches(4)):
            def closure(x=x, y=y):
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                computed[run.step] = grads64(model)
                return loss
            before = {n: p.detach().double().clone() for n, p in model.named_parameters()}
            opt.step(closure)
            moved[step] = {n: ((before[n] - p.detach().double()) / lr).numpy()
                           for n, p in model.named_parameters()}
    clipped = {}
    for step, grads in computed.items():
        coef = min(1.0, max_norm / (global_norm(grads) + 1e-6))
        clipped[step] = {n: g * coef for n, g in grads.items()}
        assert coef < 1.0
        for n in GRAD_TAGS:  # the optimizer applied the clipped gradient of this step
            np.testing.assert_allclose(moved[step][n], clipped[step][n], rtol=1e-3, atol=1e-7)
    _assert_gradients_logged(Logged(tmp_path), clipped, raw=computed)


def test_lbfgs_logs_the_gradient_of_the_first_evaluation_of_each_step(tmp_path):
    model = small_mlp()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3)
    first, evaluations = {}, []
    with gl.watch(model, opt, logdir=str(tmp_path), plugins=_gradient_plugins(),
                  strict=True) as run:
        for x, y in regression_batches(3):
            def closure(x=x, y=y):
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                first.setdefault(run.step, grads64(model))
                evaluations.append(run.step)
                return loss
            opt.step(closure)
    assert len(evaluations) > 3  # several evaluations a step, one of them logged
    assert run.step == 3
    _assert_gradients_logged(Logged(tmp_path), first)


# -- batches of any structure -------------------------------------------------------------------
@dataclasses.dataclass
class Pair:
    inputs: torch.Tensor
    targets: torch.Tensor


class Keyword(torch.nn.Module):
    """A model called with keyword arguments, as Hugging Face models are."""

    def __init__(self) -> None:
        super().__init__()
        self.net = small_mlp()

    def forward(self, inputs, targets=None):
        return self.net(inputs)


class Doubles(Plugin):
    """A mutator that doubles every input tensor of the batch, whatever its structure."""

    name = "test-doubles"
    kind = "mutator"

    def on_batch_start(self, run, batch):
        if isinstance(batch, dict):
            return {**batch, "inputs": batch["inputs"] * 2}
        if isinstance(batch, Pair):
            return Pair(batch.inputs * 2, batch.targets)
        return type(batch)([batch[0] * 2, *batch[1:]])


def _structured(kind: str, x, y):
    return {"dict": {"inputs": x, "targets": y}, "tuple": (x, y), "list": [x, y],
            "dataclass": Pair(x, y)}[kind]


def _inputs(kind: str, batch):
    return {"dict": lambda b: b["inputs"], "dataclass": lambda b: b.inputs}.get(
        kind, lambda b: b[0])(batch)


@pytest.mark.parametrize("kind", ["dict", "tuple", "list", "dataclass"])
def test_batches_of_any_structure_go_through_run_batch(tmp_path, kind):
    model = Keyword()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    applied, seen = {}, {}
    with gl.watch(model, opt, logdir=str(tmp_path), strict=True,
                  plugins=[Doubles(), *_gradient_plugins()]) as run:
        for step, (x, y) in enumerate(regression_batches(3)):
            batch = run.batch(_structured(kind, x, y))
            seen[step] = _inputs(kind, batch)
            opt.zero_grad()
            out = model(**batch) if kind == "dict" else model(_inputs(kind, batch))
            F.mse_loss(out, y).backward()
            applied[step] = grads64(model)
            opt.step()
    for step, (x, _) in enumerate(regression_batches(3)):
        torch.testing.assert_close(seen[step], x * 2)  # the mutator's replacement came back
    norms = Logged(tmp_path).scalars("grad-norm/global")
    assert [s for s, _ in norms] == [0, 1, 2]
    for step, value in norms:
        assert value == pytest.approx(global_norm(applied[step]), rel=1e-5)


class DropsAKey(Plugin):
    name = "test-drops-a-key"
    kind = "mutator"

    def on_batch_start(self, run, batch):
        return {"inputs": batch["inputs"]}


def test_a_replacement_of_a_dict_batch_must_keep_its_keys():
    model = Keyword()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = regression_batches(1)[0]
    with pytest.raises(PluginError, match=r"expected a dict with keys \['inputs', "
                                          r"'targets'\], got a dict with keys \['inputs'\]"):
        with gl.watch(model, opt, writer=MemoryWriter(), plugins=[DropsAKey()]) \
                as run:
            run.batch({"inputs": x, "targets": y})


def test_a_fused_optimizer_under_grad_scaler_logs_no_scaled_gradient_and_says_why(tmp_path):
    model = small_mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler("cpu")
    applied = {}
    with pytest.warns(RuntimeWarning, match=r"Adam unscales the gradients inside its step .* "
                                            r"call scaler.unscale_\(optimizer\) before"):
        with gl.watch(model, opt, logdir=str(tmp_path), plugins=_gradient_plugins(),
                      scaler=scaler, strict=True):
            for step, (x, y) in enumerate(regression_batches(4)):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.float16):
                    out = model(x)
                scaler.scale(F.mse_loss(out.float(), y)).backward()
                if step >= 2:  # the recipe: unscaled before the step, then logged
                    scaler.unscale_(opt)
                    applied[step] = grads64(model)
                scaler.step(opt)
                scaler.update()
    _assert_gradients_logged(Logged(tmp_path), applied)


def test_grad_clip_clamps_unscaled_gradients_in_backward_under_grad_scaler(tmp_path):
    bound = 0.01
    model = small_mlp()
    reference = copy.deepcopy(model).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=10 ** 6)
    expected = {}
    with gl.watch(model, opt, logdir=str(tmp_path), scaler=scaler, strict=True,
                  plugins=[GradClip(mode="none", clamp=bound, clamp_include=["0.weight"]),
                           *_gradient_plugins()]):
        for step, (x, y) in enumerate(regression_batches(3)):
            reference.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
            reference.zero_grad()
            F.mse_loss(reference(x.double()), y.double()).backward()
            expected[step] = {n: p.grad.numpy().copy() for n, p in reference.named_parameters()}
            expected[step]["0.weight"] = np.clip(expected[step]["0.weight"], -bound, bound)
            opt.zero_grad()
            scaler.scale(F.mse_loss(model(x), y)).backward()
            scaler.step(opt)
            scaler.update()
    assert max(np.abs(g["0.weight"]).max() for g in expected.values()) == bound  # it clamped
    logged = Logged(tmp_path)
    for step, histogram in logged.histograms("histogram/grad/0.weight"):
        assert_histogram_of(histogram, expected[step]["0.weight"])


@pytest.mark.parametrize("announced", [False, True])
def test_accumulation_under_grad_scaler_counts_a_skipped_step_as_one_step(tmp_path, announced):
    model = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)
    data = regression_batches(4 * 2)
    applied = {}
    with gl.watch(model, opt, logdir=str(tmp_path), plugins=_gradient_plugins(),
                  scaler=scaler, strict=True) as run:
        for step in range(4):
            opt.zero_grad()
            for x, y in data[2 * step:2 * step + 2]:
                if announced:
                    x, y = run.batch(x, y)
                with torch.autocast("cpu", dtype=torch.float16):
                    out = model(x)
                loss = F.mse_loss(out.float(), y) / 2
                scaler.scale(loss * (math.inf if step == 1 else 1.0)).backward()
            if step != 1:
                scale = scaler.get_scale()
                applied[step] = {n: g / scale for n, g in grads64(model).items()}
            scaler.step(opt)
            scaler.update()
    assert run.step == 4 and run.amp_skipped_steps == 1
    logged = Logged(tmp_path)
    _assert_gradients_logged(logged, applied)
    assert logged.scalars("amp/skipped_steps") == [(1, 1.0)]
    assert [s for s, _ in logged.histograms("histogram/weight/0.weight")] == [0, 1, 2, 3]


class CountingScaler(torch.amp.GradScaler):
    """A GradScaler that counts the reads of its scale (on a GPU each waits for the device)."""

    reads = 0

    def get_scale(self) -> float:
        self.reads += 1
        return super().get_scale()


@pytest.mark.parametrize("per_rank", [False, True])
def test_loss_scale_is_read_at_most_once_per_optimizer_step(tmp_path, per_rank):
    model = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = CountingScaler("cpu", init_scale=2.0 ** 12)
    steps, micro = 4, 3
    data = regression_batches(steps * micro)
    plugins = [GradClip(mode="none", clamp=1.0, clamp_include=["*"]),
               *_gradient_plugins(per_rank=per_rank)]
    with gl.watch(model, opt, logdir=str(tmp_path), plugins=plugins, scaler=scaler,
                  strict=True) as run:
        for step in range(steps):
            opt.zero_grad()
            for x, y in data[micro * step:micro * step + micro]:  # (a forward each)
                loss = F.mse_loss(model(x), y) / micro
                # (NaN: the clamp would make an inf finite; a NaN makes the scaler skip)
                scaler.scale(loss * (math.nan if step == 1 else 1.0)).backward()
            scaler.step(opt)  # (GradScaler itself never calls get_scale())
            scaler.update()
    assert run.step == steps and run.amp_skipped_steps == 1  # the skip is still seen
    assert 1 <= scaler.reads <= steps
