"""grad-noise on real gradients: the added noise has the scheduled standard deviation (a
statistical test whose tolerance comes from the sample size), anneals with t, is reproducible,
leaves the global random stream alone, comes after clipping, and resumes from a checkpoint."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gradlog_plugins.grad_clip import GradClip
from gradlog_plugins.grad_noise import GradNoise

import gradlog as gl
from gradlog.engines import engine_for
from gradlog.plugin import Plugin
from gradlog.plugin.errors import PluginConfigError
from gradlog.testing import PluginHarness


class NoiseSpy(Plugin):
    """Raw gradients after backward, and what reached the optimizer; their difference is the
    noise added by the mutators in between."""

    name = "test-noise-spy"
    kind = "observer"
    order = 100

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[np.ndarray] = []
        self.final: list[np.ndarray] = []

    @staticmethod
    def _flat(run) -> np.ndarray:
        return np.concatenate([run.engine.to_numpy(p.grad).astype(np.float64).ravel()
                               for p in run.model.parameters()])

    def on_after_backward(self, run):
        self.raw.append(self._flat(run))

    def on_before_optimizer_step(self, run):
        self.final.append(self._flat(run))

    @property
    def noise(self) -> list[np.ndarray]:
        return [f - r for r, f in zip(self.raw, self.final)]


def mlp(lib):
    """16,708 parameters: enough samples per step for a tight variance test."""
    nn = lib.nn
    return nn.Sequential(nn.Flatten(), nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 4))


def noised(lib, steps=6, seed=0, plugins=(), **options):
    spy = NoiseSpy()
    lib.manual_seed(seed)
    h = PluginHarness(GradNoise, model=mlp(lib), seed=seed, plugins=[*plugins, spy],
                      **options).run(steps)
    assert h.handles_left() == 0
    return h, spy


def scheduled_std(t, eta, gamma=0.55):
    return math.sqrt(eta / (1 + t) ** gamma)


def test_noise_has_the_scheduled_std_and_anneals(lib):
    h, spy = noised(lib, steps=6, eta=1.0)
    logged = h.scalars("grad-noise/std")
    assert logged.steps == list(range(6))
    assert logged.values == pytest.approx([scheduled_std(t, 1.0) for t in range(6)])
    assert logged.values == sorted(logged.values, reverse=True)
    for t, noise in enumerate(spy.noise):
        n, sigma = noise.size, scheduled_std(t, 1.0)
        # sample variance / sigma^2 ~ chi2(n) / n: standard deviation sqrt(2 / n); allow 5 of
        # them (a false failure about once in 3.5 million runs)
        assert abs(noise.var() / sigma**2 - 1) < 5 * math.sqrt(2 / n)
        assert abs(noise.mean()) < 5 * sigma / math.sqrt(n)
    ratio = spy.noise[5].std() / spy.noise[0].std()          # measured annealing
    assert ratio == pytest.approx(6 ** -0.275, rel=10 * math.sqrt(2 / spy.noise[0].size))


def test_default_eta_is_the_papers_smallest(lib):
    h, spy = noised(lib, steps=2)
    assert h.scalars("grad-noise/std").values[0] == pytest.approx(math.sqrt(0.01))
    assert spy.noise[0].std() == pytest.approx(0.1, rel=0.05)


def test_eta_zero_adds_nothing(lib):
    h, spy = noised(lib, steps=3, eta=0.0)
    for noise in spy.noise:
        assert not noise.any()
    assert h.scalars("grad-noise/std").values == [0.0] * 3


def test_same_seed_same_noise_other_seed_other_noise(lib):
    _, a = noised(lib, steps=3, eta=1.0)
    _, b = noised(lib, steps=3, eta=1.0)
    _, c = noised(lib, steps=3, eta=1.0, seed=1)
    for x, y, z in zip(a.noise, b.noise, c.noise):
        np.testing.assert_array_equal(x, y)
        assert not np.allclose(x, z)


def test_the_global_random_stream_is_left_alone(lib):
    class Nothing(Plugin):
        name = "test-nothing"
        kind = "observer"

    h_noise, _ = noised(lib, steps=3, eta=1.0)
    after_noise = np.array(lib.get_rng_state().numpy())
    lib.manual_seed(0)
    h_none = PluginHarness(Nothing, model=mlp(lib)).run(3)
    after_none = np.array(lib.get_rng_state().numpy())
    np.testing.assert_array_equal(after_noise, after_none)
    assert h_noise.losses[0] == h_none.losses[0]             # same init, same first batch


class Between(Plugin):
    """Records the gradients between grad-clip (10) and grad-noise (20)."""

    name = "test-between"
    kind = "observer"
    order = 15

    def __init__(self) -> None:
        super().__init__()
        self.grads: list[np.ndarray] = []

    def on_before_optimizer_step(self, run):
        self.grads.append(NoiseSpy._flat(run))


def test_noise_is_added_after_clipping(lib):
    between = Between()
    h, spy = noised(lib, steps=3, eta=1.0, plugins=[GradClip(max_norm=1e-4), between])
    assert [p.name for p in h.run_obj.plugins] == [
        "grad-clip", "test-between", "grad-noise", "test-noise-spy"]
    for t, (clipped, final) in enumerate(zip(between.grads, spy.final)):
        assert np.linalg.norm(clipped) <= 1e-4 * (1 + 1e-5)  # grad-clip ran first
        noise = final - clipped
        assert noise.std() == pytest.approx(scheduled_std(t, 1.0), rel=0.05)
        assert np.linalg.norm(final) > 1.0                   # and the noise was not clipped


def test_the_step_counter_and_generator_resume_from_a_checkpoint(tmp_path, lib):
    _, full = noised(lib, steps=6, eta=1.0)
    first, _ = noised(lib, steps=3, eta=1.0)
    engine = engine_for(first.model)
    gl.save(engine.to_checkpoint(first.run_obj.state_dict()), tmp_path / "ckpt")
    assert first.plugin.state_dict() == {"t": 3}

    spy = NoiseSpy()
    lib.manual_seed(0)
    resumed = PluginHarness(GradNoise, model=mlp(lib), plugins=[spy], eta=1.0)
    resumed.run_obj.load_state_dict(engine.from_checkpoint(gl.load(tmp_path / "ckpt")))
    resumed.run(3)
    assert resumed.plugin.t == 6
    logged = resumed.scalars("grad-noise/std")
    assert logged.steps == [3, 4, 5]
    assert logged.values == pytest.approx([scheduled_std(t, 1.0) for t in (3, 4, 5)])
    for ours, uninterrupted in zip(spy.noise, full.noise[3:]):
        np.testing.assert_allclose(ours, uninterrupted, atol=1e-6)


def test_logs_every_log_every_steps(lib):
    h, _ = noised(lib, steps=5, log_every=2)
    assert h.scalars("grad-noise/std").steps == [0, 2, 4]


@pytest.mark.parametrize("options, message", [
    ({"eta": -0.1}, "must be >= 0.0"),
    ({"eta": float("inf")}, "bad value inf for option 'eta' (float): must be a finite number"),
    ({"gamma": float("nan")}, "bad value nan for option 'gamma' (float): must be a finite "
                              "number"),
    ({"gamma": "fast"}, "expected a number"),
    ({"log_every": 0}, "must be >= 1"),
    ({"sigma": 1.0}, "has no option 'sigma'"),
])
def test_invalid_options_are_rejected(options, message):
    with pytest.raises(PluginConfigError, match="grad-noise") as info:
        GradNoise(**options)
    assert message in str(info.value)
