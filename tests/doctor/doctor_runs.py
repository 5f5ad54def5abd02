"""The labelled runs the doctor is measured on: each a realistic mistake, or a healthy run,
small enough to train in well under a second, logged with gradlog's plugins through
``gl.watch`` on either engine. (A module, not a conftest.py: see
tests/plugins/plugin_test_helpers.py.)

``CASES`` maps a name to ``(engines, build)``; ``build(lib, logdir)`` trains the run into
``logdir`` with ``lib`` (``gradlog`` or ``torch``: the code is the same, as their APIs are)
and returns the ``Expected`` finding, or None for a healthy run. Where the truth can be
observed while training (the step of the first non-finite loss, the step of the lowest
validation loss), the builder observes it itself, not from the logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import gradlog as gl

# what the offline doctor reads: every step's gradient norms, and update ratios and
# activation statistics every 5 steps
PLUGINS = ("grad-norm:every=1", 'histogram:every=5,kinds=["update_ratio"]',
           "activation-stats:every=5,at_epoch_end=false")
BOTH = ("gradlog", "torch")
GRADLOG = ("gradlog",)


@dataclass
class Expected:
    kind: str
    layers: tuple[str, ...]       # each must be among the finding's layers
    first_step: int
    tolerance: int                # |found - first_step| at most this many steps
    absent: tuple[str, ...] = ()  # layers that must not be among them


def teacher_data(n: int, features: int = 8, classes: int = 3, seed: int = 0,
                 noise: float = 0.0):
    """Inputs (drawn with ``seed``) labelled by one fixed random linear teacher; a ``noise``
    fraction of the labels replaced at random."""
    teacher = np.random.default_rng(1234).normal(size=(features, classes))
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x @ teacher).argmax(1)
    flip = rng.random(n) < noise
    y[flip] = rng.integers(0, classes, int(flip.sum()))
    return x, y.astype(np.int64)


def mlp(lib, sizes, activation="ReLU"):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(lib.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(getattr(lib.nn, activation)())
    return lib.nn.Sequential(*layers)


def init_weights(lib, model, std: float) -> None:
    with lib.no_grad():
        for module in model.modules():
            if isinstance(module, lib.nn.Linear):
                lib.nn.init.normal_(module.weight, std=std)


@dataclass
class Observed:
    first_nonfinite_loss: int | None = None
    val_losses: list | None = None  # (step, loss)

    def lowest_val_step(self) -> int:
        return min(self.val_losses, key=lambda sv: sv[1])[0]


def train(lib, logdir, plugins, model, opt, data, *, steps=200, batch=32, loss_fn=None,
          zero_grad=True, val=None, val_every=10, lr_at=None) -> Observed:
    """``steps`` optimizer steps over ``data`` (x, y) in order, logging ``train/loss`` every
    step and ``val/loss`` every ``val_every`` steps on ``val``."""
    loss_fn = loss_fn or lib.nn.functional.cross_entropy
    x_all, y_all = lib.from_numpy(data[0]), lib.from_numpy(data[1])
    probe = {"probe": {"images": x_all[:64], "labels": y_all[:64]}}
    n, seen = x_all.shape[0], Observed(val_losses=[])
    with gl.watch(model, opt, logdir=str(logdir), plugins=list(plugins), probe_sets=probe,
                  strict=True) as run:
        for step in range(steps):
            if lr_at is not None:
                for group in opt.param_groups:
                    group["lr"] = lr_at(step)
            start = (step * batch) % n
            x, y = x_all[start:start + batch], y_all[start:start + batch]
            if zero_grad:
                opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            run.log_scalar("train/loss", loss)
            if seen.first_nonfinite_loss is None and not math.isfinite(loss.item()):
                seen.first_nonfinite_loss = step
            if val is not None and (step + 1) % val_every == 0:
                with lib.no_grad():
                    v = float(loss_fn(model(lib.from_numpy(val[0])),
                                      lib.from_numpy(val[1])).item())
                run.validation_end({"val/loss": v})
                seen.val_losses.append((step + 1, v))
    return seen


# -- pathologies -------------------------------------------------------------------------------

def lr_100x_too_high(lib, logdir, plugins=PLUGINS):
    """SGD at lr 10 where 0.1 trains well: the gradients blow up within a few steps."""
    model = mlp(lib, [8, 64, 64, 3])
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=10.0, momentum=0.9),
          teacher_data(512))
    return Expected("exploding_gradient", ("0",), 0, 10)


def deep_sigmoid_mlp(lib, logdir, plugins=PLUGINS):
    """Ten sigmoid layers: each multiplies the gradient by at most 1/4."""
    model = mlp(lib, [8] + [32] * 10 + [3], "Sigmoid")
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=0.1), teacher_data(512))
    return Expected("vanishing_gradient", ("0", "2", "4"), 0, 0, absent=("18", "20"))


def log_of_zero_in_loss(lib, logdir, plugins=PLUGINS):
    """A hand-written binary cross-entropy: once the sigmoid rounds to 1.0 in float32,
    log(1 - p) is log(0)."""
    def bce(out, y):
        p = out.sigmoid()[:, 0]
        t = (y == 0).to(p.dtype) if hasattr(y, "to") else (y == 0).float()
        return -(t * p.log() + (1 - t) * (1 - p).log()).mean()

    model = mlp(lib, [8, 64, 64, 1])
    seen = train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=0.5),
                 teacher_data(512), loss_fn=bce)
    assert seen.first_nonfinite_loss is not None, "the run was meant to reach log(0)"
    return Expected("nonfinite", ("4",), seen.first_nonfinite_loss, 0)


def bias_kills_relu_layer(lib, logdir, plugins=PLUGINS):
    """A bias of -10 before the second ReLU: no input ever makes it positive."""
    model = mlp(lib, [8, 64, 64, 3])
    with lib.no_grad():
        model[2].bias.fill_(-10.0)
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=0.1), teacher_data(512))
    return Expected("dead_units", ("3",), 0, 0, absent=("1",))


def zero_grad_forgotten(lib, logdir, plugins=PLUGINS):
    model = mlp(lib, [8, 64, 64, 3])
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=0.01),
          teacher_data(512),
          zero_grad=False)
    return Expected("gradients_not_zeroed", (), 1, 5)  # nothing to carry over at step 0


def layer_left_out_of_optimizer(lib, logdir, plugins=PLUGINS):
    model = mlp(lib, [8, 64, 64, 3])
    trained = list(model[2].parameters()) + list(model[4].parameters())
    train(lib, logdir, plugins, model, lib.optim.SGD(trained, lr=0.1), teacher_data(512))
    return Expected("frozen_layer", ("0",), 0, 0, absent=("2", "4"))


def random_labels(lib, logdir, plugins=PLUGINS):
    x, _ = teacher_data(512)
    y = np.random.default_rng(5).integers(0, 3, 512)
    model = mlp(lib, [8, 16, 3])
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=0.05), (x, y),
          steps=300)
    return Expected("loss_not_decreasing", (), 0, 0)


def lr_10000x_too_small(lib, logdir, plugins=PLUGINS):
    """lr 1e-5 (a fine-tuning rate for Adam) with plain SGD."""
    model = mlp(lib, [8, 64, 64, 3])
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=1e-5),
          teacher_data(512))
    return Expected("small_update_ratio", ("0.weight", "2.weight"), 0, 10)


def lr_100x_too_high_tanh(lib, logdir, plugins=PLUGINS):
    """SGD at lr 5 on a tanh network: bounded activations keep it finite, every step
    rewrites a large part of each weight."""
    model = mlp(lib, [8, 64, 64, 3], "Tanh")
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=5.0), teacher_data(512))
    return Expected("large_update_ratio", ("4.weight",), 0, 10)


def init_std_one(lib, logdir, plugins=PLUGINS):
    """N(0, 1) weights in a 6-layer ReLU MLP of width 64: each layer multiplies the signal
    by about sqrt(64 / 2)."""
    model = mlp(lib, [8, 64, 64, 64, 64, 64, 3])
    init_weights(lib, model, 1.0)
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=0.1), teacher_data(512),
          steps=20)
    return Expected("poor_initialization", ("1", "9"), 0, 0)


def tanh_large_init(lib, logdir, plugins=PLUGINS):
    model = mlp(lib, [8, 64, 64, 3], "Tanh")
    init_weights(lib, model, 2.0)
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=0.01),
          teacher_data(512))
    return Expected("saturated_activation", ("1", "3"), 0, 0)


def tiny_train_set(lib, logdir, plugins=PLUGINS):
    """32 training examples (30 % mislabelled) for a 256-256 MLP."""
    model = mlp(lib, [8, 256, 256, 3])
    seen = train(lib, logdir, plugins, model, lib.optim.Adam(model.parameters(), lr=0.003),
                 teacher_data(32, noise=0.3), steps=300, val=teacher_data(512, seed=7))
    return Expected("overfitting", (), seen.lowest_val_step(), 10)


# -- healthy runs ------------------------------------------------------------------------------

def healthy_mlp(lib, logdir, plugins=PLUGINS):
    model = mlp(lib, [8, 64, 64, 3])
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=0.02, momentum=0.9),
          teacher_data(8192), val=teacher_data(512, seed=7))


def healthy_cnn(lib, logdir, plugins=PLUGINS):
    train_set, val_set = gl.data.Shapes(384, size=16, seed=0), gl.data.Shapes(128, size=16,
                                                                             seed=1)
    nn = lib.nn
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(16 * 4 * 4, 4))
    train(lib, logdir, plugins, model, lib.optim.Adam(model.parameters(), lr=3e-3),
          (train_set.images, train_set.labels.astype(np.int64)), steps=250,
          val=(val_set.images, val_set.labels.astype(np.int64)))


def healthy_tanh_adam(lib, logdir, plugins=PLUGINS):
    model = mlp(lib, [8, 32, 32, 32, 3], "Tanh")
    train(lib, logdir, plugins, model, lib.optim.Adam(model.parameters(), lr=0.003),
          teacher_data(8192), val=teacher_data(512, seed=7))


def healthy_noisy_loss(lib, logdir, plugins=PLUGINS):
    """Batches of 4 with 20 % wrong labels: the loss jumps around but goes down."""
    model = mlp(lib, [8, 64, 3])
    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=0.05),
          teacher_data(8192, noise=0.2), batch=4, steps=300, val=teacher_data(512, seed=7))


def healthy_warmup_spike(lib, logdir, plugins=PLUGINS):
    """A linear warm-up to a high learning rate, then cosine decay: the loss spikes near the
    top of the warm-up and recovers."""
    model = mlp(lib, [8, 64, 64, 3])

    def lr_at(step):
        return 0.2 * step / 10 if step < 10 else 0.1 * (1 + math.cos(math.pi * (step - 10) / 190))

    train(lib, logdir, plugins, model, lib.optim.SGD(model.parameters(), lr=0.0, momentum=0.9),
          teacher_data(8192), val=teacher_data(512, seed=7), lr_at=lr_at)


def cases(table) -> list:
    """``(engine, build)`` parameters, one per run and engine, for the ``engine`` fixture."""
    import pytest
    return [pytest.param(engine, build, id=f"{engine}-{name}")
            for name, (engines, build) in table.items() for engine in engines]


PATHOLOGIES = {f.__name__: (engines, f) for engines, f in (
    (BOTH, lr_100x_too_high), (BOTH, deep_sigmoid_mlp), (BOTH, log_of_zero_in_loss),
    (BOTH, bias_kills_relu_layer), (BOTH, zero_grad_forgotten),
    (BOTH, layer_left_out_of_optimizer), (BOTH, random_labels), (BOTH, lr_10000x_too_small),
    (BOTH, lr_100x_too_high_tanh), (BOTH, init_std_one), (BOTH, tanh_large_init),
    (BOTH, tiny_train_set))}
HEALTHY = {f.__name__: (engines, f) for engines, f in (
    (BOTH, healthy_mlp), (BOTH, healthy_cnn), (BOTH, healthy_tanh_adam),
    (BOTH, healthy_noisy_loss), (BOTH, healthy_warmup_spike))}
