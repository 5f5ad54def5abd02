"""A tiny model and a plain training loop for the plugin-framework tests (no layers beyond
Parameter and the functional ops, so these tests exercise the framework alone)."""

from __future__ import annotations

import numpy as np

import gradlog as gl
from gradlog import nn, optim
from gradlog.autograd.ops.linalg import linear


class Dense(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(gl.randn(n_out, n_in) * (1.0 / np.sqrt(n_in)))
        self.bias = nn.Parameter(gl.zeros(n_out))

    def forward(self, x):
        return linear(x, self.weight, self.bias)


class Net(nn.Module):
    """8 -> 16 -> 3 with a running-mean buffer updated in training mode (like BatchNorm)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = Dense(8, 16)
        self.fc2 = Dense(16, 3)
        self.register_buffer("running", gl.zeros(16))

    def forward(self, x):
        h = self.fc1(x).relu()
        if self.training:
            with gl.no_grad():
                self.running.mul_(0.9).add_(h.mean(0) * 0.1)
        return self.fc2(h)


def cross_entropy(out, y):
    return -(out.log_softmax(1)[gl.arange(len(y)), y]).mean()


def make_batches(n: int = 6, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [(gl.tensor(rng.standard_normal((4, 8)).astype(np.float32)),
             gl.tensor(rng.integers(0, 3, 4))) for _ in range(n)]


def setup_model(seed: int = 0):
    gl.manual_seed(seed)
    model = Net()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt


def user_loop(run, model, opt, batches, *, announce: bool = True) -> list[float]:
    """A user's own loop inside gl.watch."""
    losses = []
    for x, y in batches:
        if announce:
            x, y = run.batch(x, y)
        opt.zero_grad()
        loss = cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        run.log_scalar("train/loss", loss)
        losses.append(float(loss.item()))
    return losses
