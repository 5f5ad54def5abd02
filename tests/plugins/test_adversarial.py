"""adversarial on real inputs: FGSM against the sign of an independently computed input
gradient, PGD inside the eps-ball and the valid range, the perturbed fraction, free adversarial
training against a hand-written loop, attack passes without side effects (gradients, modes,
BatchNorm statistics, random streams), the epoch-end robustness evaluation, checkpoints and
options. The measured robustness is in test_adversarial_robustness.py."""

from __future__ import annotations

import numpy as np
import pytest
from gradlog_plugins.adversarial import Adversarial
from plugin_test_helpers import same_model

import gradlog as gl
from gradlog.data import DataLoader, Shapes, TensorDataset
from gradlog.plugin import Plugin, PluginError, Run
from gradlog.plugin.errors import PluginConfigError
from gradlog.testing import MemoryWriter, PluginHarness, tiny_model


def to_numpy(t):
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)


class BatchSpy(Plugin):
    """Records each training batch as it reaches this plugin's order, and (before the
    attack) the model's weights."""

    name = "test-after"
    kind = "observer"
    order = 100

    def __init__(self) -> None:
        super().__init__()
        self.x: list[np.ndarray] = []
        self.y: list[np.ndarray] = []
        self.states: list[dict] = []

    def on_batch_start(self, run, batch):
        to_numpy = run.engine.to_numpy
        self.x.append(to_numpy(batch[0]).copy())
        self.y.append(to_numpy(batch[1]).copy())
        self.states.append({k: to_numpy(v).copy() for k, v in run.model.state_dict().items()})


class BeforeSpy(BatchSpy):
    """The batch before adversarial (order 30) replaces it."""

    name = "test-before"
    order = 25


def spied(engine, n_steps=3, plugins=(), **options):
    before, after = BeforeSpy(), BatchSpy()
    h = PluginHarness(Adversarial, plugins=[*plugins, before, after], engine=engine,
                      **options).run(n_steps)
    assert h.handles_left() == 0
    return h, before, after


def test_plain_fgsm_is_eps_times_the_sign_of_the_input_gradient(lib):
    h, before, after = spied(lib.__name__, mode="fgsm", random_start=False, eps=0.05)
    for x, y, state, x_adv in zip(before.x, before.y, before.states, after.x):
        model = tiny_model(lib.__name__)
        model.load_state_dict({k: lib.from_numpy(v) for k, v in state.items()})
        model.eval()
        xt = lib.from_numpy(x).requires_grad_(True)
        loss = lib.nn.functional.cross_entropy(model(xt), lib.from_numpy(y), reduction="sum")
        (g,) = lib.autograd.grad(loss, [xt])
        g = to_numpy(g)
        expected = np.clip(x + 0.05 * np.sign(g), 0.0, 1.0)
        sure = np.abs(g) > 1e-6 * np.abs(g).max()           # signs that rounding cannot flip
        assert sure.mean() > 0.5
        np.testing.assert_allclose(x_adv[sure], expected[sure], atol=1e-6)
        assert np.abs(x_adv - x).max() <= 0.05 + 1e-6


def test_pgd_stays_in_the_eps_ball_and_the_valid_range_and_raises_the_loss(engine):
    h, before, after = spied(engine, 4, mode="pgd", eps=0.1, log_every=1)
    for x, x_adv in zip(before.x, after.x):
        assert np.abs(x_adv - x).max() <= 0.1 + 1e-6
        assert np.abs(x_adv - x).max() >= 0.05               # it did move
        assert x_adv.min() >= 0.0 and x_adv.max() <= 1.0
    clean = h.scalars("adversarial/loss_clean").values
    adv = h.scalars("adversarial/loss_adv").values
    assert h.scalars("adversarial/loss_adv").steps == [0, 1, 2, 3]
    assert all(a > c for a, c in zip(adv, clean))


def test_ratio_replaces_that_fraction_of_each_batch(engine):
    _, before, after = spied(engine, mode="fgsm", ratio=0.25)
    for x, x_adv in zip(before.x, after.x):
        changed = (x != x_adv).reshape(len(x), -1).any(axis=1)
        assert changed.sum() == 4                            # a quarter of 16
    first = (before.x[0] != after.x[0]).reshape(16, -1).any(axis=1)
    second = (before.x[1] != after.x[1]).reshape(16, -1).any(axis=1)
    assert not np.array_equal(first, second)                 # a random subset each batch


def test_the_attack_leaves_gradients_mode_and_random_state_as_they_were(lib):
    nn = lib.nn
    lib.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Dropout(0.5), nn.Flatten(), nn.Linear(4 * 16 * 16, 4))
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    run = Run(model, opt, MemoryWriter(), plugins=[Adversarial(mode="pgd", steps=3,
                                                               attack_mode="train")],
              strict=True, auto_batches=False).start()
    grads = [lib.randn(*p.shape) for p in model.parameters()]
    for p, g in zip(model.parameters(), grads):
        p.grad = g
    saved = [to_numpy(g).copy() for g in grads]
    stats = to_numpy(model[1].running_mean).copy()
    rng = to_numpy(lib.get_rng_state()).copy()
    shapes = Shapes(8, size=16)
    x, y = lib.from_numpy(shapes.images), lib.from_numpy(shapes.labels)
    x_adv, y_out = run.begin_batch((x, y))
    assert y_out is y and not np.array_equal(to_numpy(x_adv), to_numpy(x))
    for p, g, values in zip(model.parameters(), grads, saved):
        assert p.grad is g
        np.testing.assert_array_equal(to_numpy(p.grad), values)
    assert model.training and all(m.training for m in model.modules())
    np.testing.assert_array_equal(to_numpy(model[1].running_mean), stats)
    np.testing.assert_array_equal(to_numpy(lib.get_rng_state()), rng)
    run.finish()
    assert run.handles_left() == 0


class Discarding(Adversarial):
    """Computes the attack (and logs its losses) but trains on the clean batch."""

    def on_batch_start(self, run, batch):
        super().on_batch_start(run=run, batch=batch)
        return None


class Nothing(Plugin):
    name = "adversarial"
    kind = "observer"


def bn_dropout_model(lib):
    return same_model(lib, lambda nn: nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.3),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 64, 4)))


@pytest.mark.parametrize("options", [
    {"mode": "pgd", "attack_mode": "eval"},
    {"mode": "pgd", "attack_mode": "train", "labels": "pred"},
    {"mode": "fgsm", "ratio": 0.5},
    {"mode": "none"},
])
def test_an_attack_that_is_discarded_changes_nothing(options, lib):
    def losses(plugin):
        h = PluginHarness(plugin, model=bn_dropout_model(lib), log_every=1, eval_size=16,
                          **options) if plugin is Discarding else PluginHarness(
            plugin, model=bn_dropout_model(lib))
        h.run(3, epochs=2)
        assert h.handles_left() == 0
        return h
    with_attack, without = losses(Discarding), losses(Nothing)
    assert with_attack.losses == without.losses              # bit-identical trajectory
    assert len(with_attack.scalars("adversarial/robust_acc")) == 2


def counting_model(lib):
    """The tiny model counting its forward calls (no hooks: the count is the model's own)."""
    class CountingSequential(lib.nn.Sequential):
        calls = 0

        def forward(self, x):
            CountingSequential.calls += 1
            return super().forward(x)
    return CountingSequential(*tiny_model(lib.__name__).children())


def test_free_mode_adds_no_pass_and_pgd_adds_steps_passes(lib):
    for options, per_step in (({"mode": "free"}, 1), ({"mode": "pgd", "steps": 3}, 4)):
        model = counting_model(lib)
        PluginHarness(Adversarial, model=model, log_every=1000, eval_every=0,
                      **options).run(4)
        # + 2: the clean and adversarial loss logged at step 0
        assert type(model).calls == 4 * per_step + 2


def loader(seed=0):
    shapes = Shapes(64, size=16, seed=seed)
    return DataLoader(TensorDataset(gl.from_numpy(shapes.images),
                                    gl.from_numpy(shapes.labels)),
                      batch_size=16, shuffle=True, generator=gl.Generator().manual_seed(seed))


def free_by_hand(lib, steps, replays, eps):
    """Shafahi et al.'s loop written out: replay each minibatch, update the perturbation
    with the sign of its gradient from the training backward, project, carry it over."""
    gl.manual_seed(0)
    model = tiny_model(lib.__name__)
    opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = lib.nn.CrossEntropyLoss()
    delta = lib.zeros(16, 1, 16, 16, requires_grad=True)
    losses, held, k = [], None, 0
    data = loader()
    while k < steps:
        for batch in data:
            if k == steps:
                break
            if k % replays == 0:
                held = tuple(lib.from_numpy(np.asarray(t)) for t in batch)
            x, y = held
            opt.zero_grad()
            loss = loss_fn(model((x + delta[: len(x)]).clamp(0.0, 1.0)), y)
            loss.backward()
            with lib.no_grad():
                delta.add_(delta.grad.sign() * eps)
                delta.clamp_(-eps, eps)
            delta.grad = None
            opt.step()
            losses.append(loss.item())
            k += 1
    return losses


def test_free_mode_matches_a_hand_written_free_loop(lib):
    gl.manual_seed(0)
    after = BatchSpy()
    h = PluginHarness(Adversarial, model=tiny_model(lib.__name__), data=loader(),
                      plugins=[after], mode="free", replays=3, eps=0.05, log_every=1,
                      eval_every=0).run(7)
    assert h.losses == free_by_hand(lib, 7, 3, 0.05)
    for k in range(7):                                       # minibatches 0, 3, 6 replayed
        np.testing.assert_array_equal(after.x[k], after.x[k - k % 3])
    assert not np.array_equal(after.x[0], after.x[3])
    assert h.handles_left() == 0


def test_epoch_end_logs_clean_and_robust_accuracy_of_the_model(lib):
    h = PluginHarness(Adversarial, mode="fgsm", eval_size=32,
                      engine=lib.__name__).run(4, epochs=2)
    clean = h.scalars("adversarial/clean_acc")
    robust = h.scalars("adversarial/robust_acc")
    assert clean.steps == robust.steps == [4, 8]
    val = h.run_obj.probe_sets["validation"]
    h.model.eval()
    with lib.no_grad():
        pred = to_numpy(h.model(val["images"][:32])).argmax(axis=1)
    assert clean.values[-1] == np.mean(pred == to_numpy(val["labels"][:32]))
    assert all(0.0 <= r <= c for r, c in zip(robust.values, clean.values))


def test_eval_every_and_a_missing_validation_set(engine):
    h = PluginHarness(Adversarial, mode="none", eval_every=2, eval_size=16,
                      engine=engine).run(2, epochs=4)
    assert h.scalars("adversarial/robust_acc").steps == [4, 8]
    h = PluginHarness(Adversarial, mode="none", probe_sets={"probe": {}}, data=loader(),
                      engine=engine)
    with pytest.warns(RuntimeWarning, match="no 'validation' probe set"):
        h.run(1)
    assert h.tags() == []


def test_free_mode_state_survives_a_checkpoint(tmp_path, engine):
    gl.manual_seed(0)
    h = PluginHarness(Adversarial, model=tiny_model(engine), data=loader(), mode="free",
                      replays=4, log_every=1000, eval_every=0).run(5)
    state = h.plugin.state_dict()
    assert state["batches"] == 5 and state["delta"].shape == (16, 1, 16, 16)
    assert np.abs(state["delta"]).max() == pytest.approx(0.03)          # the default eps
    gl.save(state, tmp_path / "ckpt")
    restored = Adversarial(mode="free", replays=4, eval_every=0)
    restored.load_state_dict(gl.load(tmp_path / "ckpt"))
    after = BatchSpy()
    PluginHarness(restored, model=tiny_model(engine), data=loader(seed=1),
                  plugins=[after]).run(1)
    np.testing.assert_array_equal(after.x[0], state["held_x"])   # still replaying
    np.testing.assert_array_equal(after.y[0], state["held_y"])


def test_needs_labels_in_a_users_loop_without_run_batch(lib):
    model, writer = tiny_model(lib.__name__), MemoryWriter()
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    shapes = Shapes(4, size=16)
    x, y = lib.from_numpy(shapes.images), lib.from_numpy(shapes.labels)
    with gl.watch(model, opt, plugins=[Adversarial(eval_every=0)], writer=writer) as run:
        xa, ya = run.batch(x, y)                            # announced: perturbed
        assert not np.array_equal(to_numpy(xa), to_numpy(x)) and ya is y
        lib.nn.functional.cross_entropy(model(xa), ya).backward()
        opt.step()
    with pytest.raises(PluginError, match="adversarial.*run.batch\\(x, y\\)"):
        with gl.watch(model, opt, plugins=[Adversarial(eval_every=0)], writer=writer):
            model(x)                                         # not announced: no labels


@pytest.mark.parametrize("options, message", [
    ({"eps": 0.0}, "eps must be a finite number > 0, got 0.0"),
    ({"eps": -0.1}, "must be >= 0.0"),
    ({"mode": "cw"}, "'pgd'"),
    ({"alpha": -1.0}, "alpha must be a finite number > 0, got -1.0"),
    ({"clip_min": 1.0, "clip_max": 0.0}, "clip_min (1.0) must be below clip_max (0.0)"),
    ({"ratio": 0.0}, "ratio must be > 0, got 0.0"),
    ({"ratio": 1.5}, "must be <= 1.0"),
    ({"mode": "free", "ratio": 0.5}, "ratio=0.5 applies to mode=fgsm and mode=pgd"),
    ({"mode": "free", "labels": "pred"}, "labels='pred' applies to mode=fgsm and mode=pgd"),
    ({"steps": 0}, "must be >= 1"),
    ({"replays": 0}, "must be >= 1"),
    ({"eval_size": 0}, "must be >= 1"),
    ({"labels": "soft"}, "'true'"),
])
def test_invalid_options_are_rejected(options, message):
    with pytest.raises(PluginConfigError, match="adversarial") as info:
        Adversarial(**options)
    assert message in str(info.value)


def test_default_step_sizes():
    assert Adversarial(mode="pgd", eps=0.1, steps=5).options.step_size() == pytest.approx(0.05)
    assert Adversarial(mode="fgsm", eps=0.1).options.step_size() == pytest.approx(0.125)
    assert Adversarial(mode="fgsm", eps=0.1, random_start=False).options.step_size() == 0.1
    assert Adversarial(mode="free", eps=0.1).options.step_size() == 0.1
    assert Adversarial(mode="pgd", alpha=0.02).options.step_size() == 0.02
