"""grad-clip on real gradients: the norm, value and AGC rules against hand computations, clamp
hooks bounding the gradient that flows through an activation, the clip-fraction window and its
checkpoint, the non-finite policy (and that a failing mutator stops the run), options."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gradlog_plugins.grad_clip import GradClip
from plugin_test_helpers import same_model

import gradlog as gl
from gradlog.plugin import Plugin, PluginError
from gradlog.plugin.errors import PluginConfigError
from gradlog.testing import PluginHarness


class GradSpy(Plugin):
    """Records weights and raw gradients after backward, and the final gradients that reach
    the optimizer (it runs after every mutator)."""

    name = "test-grad-spy"
    kind = "observer"
    order = 100

    def __init__(self) -> None:
        super().__init__()
        self.weights: list[dict] = []
        self.raw: list[dict] = []
        self.final: list[dict] = []

    def on_after_backward(self, run):
        named = list(run.model.named_parameters())
        to_numpy = run.engine.to_numpy
        self.weights.append({n: to_numpy(p).copy() for n, p in named})
        self.raw.append({n: to_numpy(p.grad).copy() for n, p in named if p.grad is not None})

    def on_before_optimizer_step(self, run):
        self.final.append({n: run.engine.to_numpy(p.grad).copy()
                           for n, p in run.model.named_parameters() if p.grad is not None})


def total_norm(grads: dict, p: float) -> float:
    flat = np.concatenate([g.astype(np.float64).ravel() for g in grads.values()])
    if math.isinf(p):
        return float(np.abs(flat).max())
    return float((np.abs(flat) ** p).sum() ** (1.0 / p))


def harness(engine, spy=None, steps=4, **options):
    spy = spy or GradSpy()
    h = PluginHarness(GradClip, plugins=[spy], engine=engine, **options).run(steps)
    return h, spy


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 0.5])
def test_norm_mode_scales_gradients_to_max_norm(norm_type, engine):
    h, spy = harness(engine, mode="norm", max_norm=0.005, norm_type=norm_type)
    before = h.scalars("grad-clip/norm_before").values
    after = h.scalars("grad-clip/norm_after").values
    for i, (raw, final) in enumerate(zip(spy.raw, spy.final)):
        n_raw = total_norm(raw, norm_type)
        assert n_raw > 0.005                                 # every step needed clipping
        assert before[i] == pytest.approx(n_raw, rel=1e-5)
        coef = 0.005 / (n_raw + 1e-6)                        # PyTorch's guard: just below
        assert total_norm(final, norm_type) == pytest.approx(n_raw * coef, rel=1e-5)
        assert after[i] == pytest.approx(n_raw * coef, rel=1e-5)
        assert after[i] == pytest.approx(0.005, rel=1e-3)
        for name in raw:                                     # one coefficient for all
            np.testing.assert_allclose(final[name], raw[name] * coef, rtol=2e-6, atol=1e-12)
    assert h.scalars("grad-clip/clip_fraction").values == [1.0] * 4
    assert h.handles_left() == 0


def test_norm_mode_leaves_small_gradients_alone(engine):
    h, spy = harness(engine, mode="norm", max_norm=1e6)
    for raw, final in zip(spy.raw, spy.final):
        for name in raw:
            np.testing.assert_array_equal(final[name], raw[name])
    assert h.scalars("grad-clip/coef").values == [1.0] * 4
    assert h.scalars("grad-clip/clip_fraction").values == [0.0] * 4


def test_value_mode_bounds_every_element_and_counts_them(engine):
    h, spy = harness(engine, mode="value", clip_value=0.005)
    fracs = h.scalars("grad-clip/elem_clip_frac").values
    for i, (raw, final) in enumerate(zip(spy.raw, spy.final)):
        over = sum(int((np.abs(g) > 0.005).sum()) for g in raw.values())
        size = sum(g.size for g in raw.values())
        assert 0 < over < size                               # some clipped, some not
        assert fracs[i] == pytest.approx(over / size)
        for name in raw:
            np.testing.assert_array_equal(final[name], np.clip(raw[name], -0.005, 0.005))
    assert h.handles_left() == 0


def agc_by_hand(weight, grad, clipping=0.01, eps=1e-3):
    """Brock et al. (2021), per output unit (axis 0), whole tensor for vectors, in float64."""
    w, g = weight.astype(np.float64), grad.astype(np.float64)
    axes = tuple(range(1, w.ndim)) if w.ndim > 1 else None
    w_norm = np.sqrt((w * w).sum(axis=axes, keepdims=axes is not None))
    g_norm = np.sqrt((g * g).sum(axis=axes, keepdims=axes is not None))
    max_norm = clipping * np.maximum(w_norm, eps)
    scale = np.where(g_norm > max_norm, max_norm / np.maximum(g_norm, 1e-6), 1.0)
    return g * scale, int(np.count_nonzero(g_norm > max_norm)), np.size(g_norm)


@pytest.mark.parametrize("skip_final", [True, False])
def test_agc_matches_a_hand_computation(skip_final, engine):
    h, spy = harness(engine, mode="agc", agc_skip_final=skip_final, steps=3)
    final_layer = {"7.weight", "7.bias"}                     # the tiny model's last Linear
    for i, (w, raw, final) in enumerate(zip(spy.weights, spy.raw, spy.final)):
        clipped = units = 0
        for name in raw:
            if skip_final and name in final_layer:
                np.testing.assert_array_equal(final[name], raw[name])
                continue
            expected, c, u = agc_by_hand(w[name], raw[name])
            clipped, units = clipped + c, units + u
            np.testing.assert_allclose(final[name], expected, rtol=1e-5, atol=1e-10)
        assert 0 < clipped                                   # the rule did something
        assert h.scalars("grad-clip/unit_clip_frac").values[i] == pytest.approx(clipped / units)
    assert h.handles_left() == 0


class ActivationGradSpy(Plugin):
    """Records the gradient w.r.t. module '0's output (what flows back through the ReLU)."""

    name = "test-activation-grad-spy"
    kind = "observer"
    order = 100

    def __init__(self) -> None:
        super().__init__()
        self.grads: list[np.ndarray] = []

    def setup(self, run):
        run.hooks.register_full_backward_pre_hook("0", self._record)

    def _record(self, module, grad_output):
        self.grads.append(np.array(grad_output[0].detach().numpy()))


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # torch: input needs no grad
def test_clamp_hook_bounds_the_gradient_flowing_through_an_activation(engine):
    free = ActivationGradSpy()
    PluginHarness(GradClip, plugins=[free], mode="none", max_norm=1.0, engine=engine).run(3)
    bound = 0.25 * float(np.abs(free.grads[0]).max())
    spy = ActivationGradSpy()
    h = PluginHarness(GradClip, plugins=[spy], mode="none", clamp=bound,
                      clamp_include=["1"], engine=engine).run(3)  # module '1': the ReLU
    assert max(float(np.abs(g).max()) for g in free.grads) > bound
    for g in spy.grads:
        assert np.abs(g).max() <= np.float32(bound)            # the bound in the grads' dtype
        assert np.count_nonzero(g) > 0
    assert h.handles_left() == 0


def test_clamp_hook_bounds_a_parameter_gradient(engine):
    spy = GradSpy()
    h = PluginHarness(GradClip, plugins=[spy], mode="none", clamp=1e-3,
                      clamp_include=["0.weight"], engine=engine).run(3)
    for raw in spy.raw:                                      # clamped during backward
        assert np.abs(raw["0.weight"]).max() <= np.float32(1e-3)
        assert float(np.abs(raw["3.weight"]).max()) > 1e-3      # not selected: untouched
    assert h.handles_left() == 0


def test_clip_fraction_is_the_fraction_of_clipped_steps_in_the_window(engine):
    h, _ = harness(engine, mode="norm", max_norm=0.2, window=3, steps=12)
    before = h.scalars("grad-clip/norm_before").values
    flags = [0.2 / (b + 1e-6) < 1.0 for b in before]
    assert 0 < sum(flags) < len(flags)                      # a mix of clipped and not
    expected = [sum(flags[max(0, i - 2):i + 1]) / len(flags[max(0, i - 2):i + 1])
                for i in range(len(flags))]
    assert h.scalars("grad-clip/clip_fraction").values == pytest.approx(expected)


def test_window_survives_a_checkpoint_round_trip(tmp_path, engine):
    h, _ = harness(engine, mode="norm", max_norm=0.2, window=5, steps=7)
    plugin = h.plugin
    gl.save({"grad-clip": plugin.state_dict()}, tmp_path / "ckpt")
    restored = GradClip(mode="norm", max_norm=0.2, window=5)
    restored.load_state_dict(gl.load(tmp_path / "ckpt")["grad-clip"])
    assert list(restored.window) == list(plugin.window) and len(restored.window) == 5
    assert restored.clip_fraction == plugin.clip_fraction
    assert restored.state_dict() == plugin.state_dict()


def test_logs_every_log_every_steps(engine):
    h, _ = harness(engine, mode="norm", max_norm=0.1, log_every=2, steps=5)
    for tag in ("norm_before", "norm_after", "coef", "clip_fraction"):
        assert h.scalars(f"grad-clip/{tag}").steps == [0, 2, 4]


class PoisonGrad(Plugin):
    """Sets one gradient element to inf at the given steps, before grad-clip runs."""

    name = "test-poison-grad"
    kind = "mutator"
    order = 5

    def __init__(self, steps) -> None:
        super().__init__()
        self.steps = steps

    def on_before_optimizer_step(self, run):
        if run.step in self.steps:
            p = dict(run.model.named_parameters())["3.weight"]
            g = run.engine.to_numpy(p.grad).copy()
            g.flat[0] = np.inf
            with run.engine.no_grad():
                p.grad.copy_(run.engine.from_numpy(g))


def test_nonfinite_norm_is_not_clipped_but_counted_and_reported(engine):
    spy = GradSpy()
    with pytest.warns(RuntimeWarning, match="non-finite gradients in 3.weight"):
        h = PluginHarness(GradClip, plugins=[PoisonGrad([1]), spy], max_norm=0.05,
                          engine=engine).run(2)
    final = spy.final[1]
    assert np.isinf(final["3.weight"].flat[0])
    for name, g in final.items():                           # finite gradients not zeroed
        np.testing.assert_array_equal(g[np.isfinite(g)],
                                      spy.raw[1][name][np.isfinite(g)])
    assert h.scalars("grad-clip/nonfinite_steps").values == [1.0]
    assert h.scalars("grad-clip/nonfinite_steps").steps == [1]
    assert "not clipped" in h.texts("grad-clip/nonfinite").values[0]
    assert h.scalars("grad-clip/norm_before").steps == [0]   # step 1 not logged as clipped


def test_error_if_nonfinite_stops_the_run_with_the_plugins_name(engine):
    h = PluginHarness(GradClip, plugins=[PoisonGrad([1])], strict=False, max_norm=0.05,
                      error_if_nonfinite=True, engine=engine)
    with pytest.raises(PluginError, match="plugin 'grad-clip' failed in "
                                          "on_before_optimizer_step at step 1") as info:
        h.run(3)
    assert isinstance(info.value.error, RuntimeError)
    assert len(h.losses) == 1                               # stopped at the failing step
    assert h.handles_left() == 0


EXAMPLE = '''
import numpy as np
import gradlog as gl
from gradlog import nn, optim
from gradlog.data import DataLoader, TensorDataset

def build(config):
    x = np.zeros((8, 4), np.float32)
    x[5, 0] = np.inf                                        # batch 1 has a non-finite input
    y = np.zeros(8, np.int64)
    model = nn.Sequential(nn.Linear(4, 2))
    data = DataLoader(TensorDataset(gl.from_numpy(x), gl.from_numpy(y)), batch_size=4)
    return {"model": model, "optimizer": optim.SGD(model.parameters(), lr=0.1),
            "loss_fn": nn.CrossEntropyLoss(), "train_loader": data, "val_loader": data}
'''


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_a_failing_mutator_makes_gradlog_train_exit_1(tmp_path):
    import io

    from gradlog.train import TrainOptions, train
    example = tmp_path / "nonfinite.py"
    example.write_text(EXAMPLE)
    err = io.StringIO()
    code = train(TrainOptions(example=str(example), logdir=str(tmp_path / "run"), epochs=1,
                              plugins=("grad-clip:error_if_nonfinite=true",),
                              default_plugins=False, quiet=True), out=io.StringIO(), err=err)
    assert code == 1
    assert "plugin 'grad-clip' failed in on_before_optimizer_step at step 1" in err.getvalue()


@pytest.mark.parametrize("options, message", [
    ({"mode": "clip"}, "'norm'"),
    ({"max_norm": 0.0}, "max_norm must be a finite number > 0, got 0.0"),
    ({"max_norm": -1.0}, "must be >= 0.0"),
    ({"norm_type": -2.0}, "norm_type must be > 0 (or inf), got -2.0"),
    ({"clip_value": float("inf")}, "bad value inf for option 'clip_value' (float): must be a "
                                   "finite number"),
    ({"agc_clipping": 0.0}, "agc_clipping must be a finite number > 0"),
    ({"window": 0}, "must be >= 1"),
    ({"clamp": 0.1}, "clamp needs clamp_include"),
    ({"clamp_include": ["0"]}, "needs clamp=<bound>"),
    ({"clamp": -1.0, "clamp_include": ["0"]}, "clamp must be a finite number > 0, got -1.0"),
    ({"log_every": "often"}, "expected an integer"),
])
def test_invalid_options_are_rejected_before_training(options, message):
    with pytest.raises(PluginConfigError, match="grad-clip") as info:
        GradClip(**options)
    assert message in str(info.value)


def test_an_unknown_clamp_target_is_rejected_before_the_first_step(engine):
    h = PluginHarness(GradClip, clamp=0.1, clamp_include=["fc*"], engine=engine)
    with pytest.raises(PluginConfigError, match="'fc\\*' matches no parameter or module"):
        h.run(2)
    assert h.losses == []
    assert h.handles_left() == 0


def test_agc_skips_the_last_module_with_parameters(lib):
    model = same_model(lib, lambda nn: nn.Sequential(
        nn.Flatten(), nn.Linear(256, 8), nn.ReLU(), nn.Linear(8, 4), nn.ReLU()))
    spy = GradSpy()
    h = PluginHarness(GradClip, model=model, plugins=[spy], mode="agc").run(2)
    for raw, final in zip(spy.raw, spy.final):
        np.testing.assert_array_equal(final["3.weight"], raw["3.weight"])
        np.testing.assert_array_equal(final["3.bias"], raw["3.bias"])
        assert not np.array_equal(final["1.weight"], raw["1.weight"])
    assert h.handles_left() == 0
