"""W2 (CNN step) and W4c (W2 with gradlog train's default plugins at their default cadence).

W2: conv(1->16,3x3,p1)-ReLU-maxpool2 -> conv(16->32,3x3,p1)-ReLU-maxpool2 -> linear(1568->10),
cross-entropy, SGD, batch 64, 1x28x28, float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .common import EngineModel, check_trajectories, cycler, interleaved, torch_or_none

BATCH, SIZE, LR = 64, 28, 0.05


def make_weights(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)

    def u(shape: tuple, fan_in: int) -> np.ndarray:
        b = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-b, b, shape).astype(np.float32)
    return [u((16, 1, 3, 3), 9), u((16,), 9), u((32, 16, 3, 3), 144), u((32,), 144),
            u((10, 1568), 1568), u((10,), 1568)]


def make_batches(n: int, seed: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.random((BATCH, 1, SIZE, SIZE), dtype=np.float32),
             rng.integers(0, 10, BATCH).astype(np.int64)) for _ in range(n)]


def _conv_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple:
    """3x3, stride 1, padding 1: im2col as (N, C*9, H*W), then one (batched) matmul."""
    n, c, h, wd = x.shape
    o = w.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = sliding_window_view(xp, (3, 3), axis=(2, 3))          # n, c, h, w, 3, 3
    cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * 9, h * wd)
    out = np.matmul(w.reshape(o, c * 9), cols)                  # n, o, h*w
    out += b[:, None]
    return out.reshape(n, o, h, wd), cols


def _conv_backward(g: np.ndarray, cols: np.ndarray, w: np.ndarray, x_shape: tuple,
                   need_input: bool) -> tuple:
    n, c, h, wd = x_shape
    o = w.shape[0]
    g3 = g.reshape(n, o, h * wd)
    gw = np.tensordot(g3, cols, axes=([0, 2], [0, 2])).reshape(w.shape)
    gb = g3.sum(axis=(0, 2))
    if not need_input:
        return gw, gb, None
    gcols = np.matmul(w.reshape(o, c * 9).T, g3).reshape(n, c, 3, 3, h, wd)
    gxp = np.zeros((n, c, h + 2, wd + 2), dtype=g.dtype)
    for i in range(3):
        for j in range(3):
            gxp[:, :, i:i + h, j:j + wd] += gcols[:, :, i, j]
    return gw, gb, gxp[:, :, 1:-1, 1:-1]


def _pool_forward(x: np.ndarray) -> tuple:
    """2x2, stride 2: the maximum of the four strided views."""
    views = (x[:, :, 0::2, 0::2], x[:, :, 0::2, 1::2], x[:, :, 1::2, 0::2], x[:, :, 1::2, 1::2])
    out = np.maximum(np.maximum(views[0], views[1]), np.maximum(views[2], views[3]))
    return out, views


def _pool_backward(g: np.ndarray, views: tuple, out: np.ndarray) -> np.ndarray:
    """The gradient goes to the first maximum of each window."""
    n, c, h2, w2 = out.shape
    gx = np.zeros((n, c, h2 * 2, w2 * 2), dtype=g.dtype)
    taken = np.zeros(out.shape, dtype=bool)
    for (di, dj), v in zip(((0, 0), (0, 1), (1, 0), (1, 1)), views):
        hit = (v == out) & ~taken
        taken |= hit
        gx[:, :, di::2, dj::2] = g * hit
    return gx


class FloorCNN:
    """The same step by hand in numpy: im2col + one matmul per convolution, col2im by kernel
    position, pooling on strided views (the fastest numpy forms measured here)."""

    def __init__(self, weights: list) -> None:
        self.p = [w.copy() for w in weights]

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        w1, b1, w2, b2, w3, b3 = self.p
        h1, cols1 = _conv_forward(x, w1, b1)
        a1 = np.maximum(h1, 0)
        p1, v1 = _pool_forward(a1)
        h2, cols2 = _conv_forward(p1, w2, b2)
        a2 = np.maximum(h2, 0)
        p2, v2 = _pool_forward(a2)
        flat = p2.reshape(len(x), -1)
        out = flat @ w3.T
        out += b3
        shifted = out - out.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        s = e.sum(axis=1, keepdims=True)
        rows = np.arange(len(y))
        loss = float(np.log(s[:, 0]).mean() - shifted[rows, y].mean())
        g = e / s
        g[rows, y] -= 1
        g /= len(y)
        gw3, gb3 = g.T @ flat, g.sum(0)
        g = (g @ w3).reshape(p2.shape)
        g = _pool_backward(g, v2, p2) * (h2 > 0)
        gw2, gb2, g = _conv_backward(g, cols2, w2, p1.shape, True)
        g = _pool_backward(g, v1, p1) * (h1 > 0)
        gw1, gb1, _ = _conv_backward(g, cols1, w1, x.shape, False)
        for p, grad in zip(self.p, (gw1, gb1, gw2, gb2, gw3, gb3)):
            p -= LR * grad
        return loss


def _layers(nn: Any) -> list:
    return [nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(1568, 10)]


class GradlogCNN(EngineModel):
    def __init__(self, weights: list) -> None:
        import gradlog as gl
        from gradlog import nn, optim
        self.lib = gl
        self.model = nn.Sequential(*_layers(nn))
        with gl.no_grad():
            for p, w in zip(self.model.parameters(), weights):
                p.copy_(gl.from_numpy(w))
        self.opt = optim.SGD(self.model.parameters(), lr=LR)
        self.loss_fn = nn.CrossEntropyLoss()


class TorchCNN(EngineModel):
    def __init__(self, weights: list) -> None:
        import torch
        self.lib = torch
        self.model = torch.nn.Sequential(*_layers(torch.nn))
        with torch.no_grad():
            for p, w in zip(self.model.parameters(), weights):
                p.copy_(torch.from_numpy(w))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR)
        self.loss_fn = torch.nn.CrossEntropyLoss()


def run(quick: bool, blocks: int) -> dict[str, Any]:
    from .mlp import _ratios
    weights = make_weights()
    batches = make_batches(4 if quick else 8)
    trajectories = check_trajectories("W2", FloorCNN, GradlogCNN, TorchCNN, weights, batches, 4)
    if quick:
        return {"W2": {"checked": trajectories}, "W4c": default_plugins_overhead(
            weights, batches, blocks=1, per_block=2)}
    contenders = {"floor": cycler(FloorCNN(weights), batches),
                  "gradlog": cycler(GradlogCNN(weights), batches)}
    if torch_or_none() is not None:
        contenders["torch"] = cycler(TorchCNN(weights), batches)
    t = interleaved(contenders, blocks=blocks, per_block=5)
    return {"W2": _ratios(t, "median", target=("gradlog", "floor", 1.20)),
            "W4c": default_plugins_overhead(weights, batches, blocks=max(blocks // 2, 3),
                                            per_block=100)}


def default_plugins_overhead(weights: list, batches: list, blocks: int,
                             per_block: int) -> dict[str, Any]:
    """W2 inside gl.watch with gradlog train's default plugins at their default cadence,
    logging to event files with the writer's background thread on and off; blocks of 100
    steps so periodic work (every-100-steps histograms, probes) is included. Wall-clock time,
    each block ending with a flush (see :mod:`benchmarks.watch`)."""
    import shutil
    import tempfile
    import time

    import gradlog as gl
    from gradlog.tensorboard import SummaryWriter
    from gradlog.train import DEFAULT_PLUGINS

    from .mlp import _ratios
    probe = {"probe": {"images": gl.from_numpy(batches[0][0][:8].copy()),
                       "labels": gl.from_numpy(batches[0][1][:8].copy())}}
    contenders, flushes, runs = {"plain": cycler(GradlogCNN(weights), batches)}, {}, []
    for mode in ("background", "synchronous"):
        watched = GradlogCNN(weights)
        writer = SummaryWriter(tempfile.mkdtemp(prefix="gradlog-bench-"),
                               background=mode == "background")
        runs.append((gl.watch(watched.model, watched.opt, plugins=list(DEFAULT_PLUGINS),
                              writer=writer, probe_sets=probe), writer))
        contenders[mode] = cycler(watched, batches)
        flushes[mode] = writer.flush
    try:
        t = interleaved(contenders, blocks=blocks, per_block=per_block, warmup=1,
                        timer=time.perf_counter, after_block=flushes)
    finally:
        for run, writer in runs:
            run.close()
            writer.close()
            shutil.rmtree(writer.get_logdir(), ignore_errors=True)
    out = _ratios(t, "median", target=("background", "plain", 1.10))
    out["background/plain (process cpu)"] = t["background"].cpu_median / t["plain"].cpu_median
    out["synchronous/plain (process cpu)"] = (t["synchronous"].cpu_median
                                              / t["plain"].cpu_median)
    out["plugins"] = list(DEFAULT_PLUGINS)
    return out
