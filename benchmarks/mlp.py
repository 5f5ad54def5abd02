"""W1 (MLP step) and W4 (W1 with hooks); the logging variants of W1 (W4b, W4d, W4e, W4f) are
in :mod:`benchmarks.watch`.

W1: 784-256-256-10, ReLU, cross-entropy, SGD momentum 0.9, batch 128, float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import EngineModel, check_trajectories, cycler, interleaved, torch_or_none

SIZES = (784, 256, 256, 10)
# W1's steps per timing block: a training loop runs one model for many steps, and blocks of 5
# (10 ms) measured how each contender recovers from the others' blocks (1.17-1.19x the floor
# against 1.12-1.13x in blocks of 100, PyTorch 1.35-1.39x against 1.24-1.29x), and were shorter
# than the VM's scheduling noise
PER_BLOCK = 100
BATCH = 128
LR, MOMENTUM = 0.01, 0.9


def make_weights(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for n_in, n_out in zip(SIZES[:-1], SIZES[1:]):
        bound = 1.0 / np.sqrt(n_in)
        out.append((rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32),
                    rng.uniform(-bound, bound, n_out).astype(np.float32)))
    return out


def make_batches(n: int, seed: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((BATCH, SIZES[0])).astype(np.float32),
             rng.integers(0, SIZES[-1], BATCH).astype(np.int64)) for _ in range(n)]


class FloorMLP:
    """The same step written by hand in numpy: the floor for any numpy engine."""

    def __init__(self, weights: list) -> None:
        self.params = [a.copy() for pair in weights for a in pair]
        self.bufs = [np.zeros_like(p) for p in self.params]

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        w1, b1, w2, b2, w3, b3 = self.params
        h1 = x @ w1.T
        h1 += b1
        a1 = np.maximum(h1, 0)
        h2 = a1 @ w2.T
        h2 += b2
        a2 = np.maximum(h2, 0)
        out = a2 @ w3.T
        out += b3
        shifted = out - out.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        s = e.sum(axis=1, keepdims=True)
        n = len(y)
        rows = np.arange(n)
        loss = float(np.log(s[:, 0]).mean() - shifted[rows, y].mean())
        g = e / s
        g[rows, y] -= 1
        g /= n
        grads = [None] * 6
        grads[4], grads[5] = g.T @ a2, g.sum(0)
        g = g @ w3
        g *= h2 > 0
        grads[2], grads[3] = g.T @ a1, g.sum(0)
        g = g @ w2
        g *= h1 > 0
        grads[0], grads[1] = g.T @ x, g.sum(0)
        for p, buf, grad in zip(self.params, self.bufs, grads):
            buf *= MOMENTUM
            buf += grad
            p -= LR * buf
        return loss


class GradlogMLP(EngineModel):
    def __init__(self, weights: list) -> None:
        import gradlog as gl
        from gradlog import nn, optim
        self.lib = gl
        layers: list[Any] = []
        for i, (w, b) in enumerate(weights):
            lin = nn.Linear(w.shape[1], w.shape[0])
            with gl.no_grad():
                lin.weight.copy_(gl.from_numpy(w))
                lin.bias.copy_(gl.from_numpy(b))
            layers.append(lin)
            if i < len(weights) - 1:
                layers.append(nn.ReLU())
        self.model = nn.Sequential(*layers)
        self.opt = optim.SGD(self.model.parameters(), lr=LR, momentum=MOMENTUM)
        self.loss_fn = nn.CrossEntropyLoss()

    def add_noop_hooks(self) -> None:
        """W4: a no-op forward hook on every module that also puts a no-op tensor hook on the
        module's output (every activation)."""
        def noop_grad(g: Any) -> None:
            return None

        def forward_hook(module: Any, args: Any, output: Any) -> None:
            output.register_hook(noop_grad)

        for module in self.model.modules():
            module.register_forward_hook(forward_hook)


def torch_mlp(weights: list) -> Any:
    """W1's MLP as a ``torch.nn.Sequential`` holding ``weights``."""
    import torch
    layers: list[Any] = []
    for i, (w, b) in enumerate(weights):
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        if i < len(weights) - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class TorchMLP(EngineModel):
    """W1's MLP in PyTorch, on ``device`` (model and each batch moved there)."""

    def __init__(self, weights: list, device: str = "cpu") -> None:
        import torch
        self.lib = torch
        self.device = device
        self.model = torch_mlp(weights).to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=MOMENTUM)
        self.loss_fn = torch.nn.CrossEntropyLoss()

    def step(self, x: np.ndarray, y: np.ndarray) -> Any:
        """One step; the loss as a float on the CPU, as a tensor on another device (reading
        it would wait for the device at every step, which a training loop does not do)."""
        if self.device == "cpu":
            return super().step(x, y)
        torch = self.lib
        self.opt.zero_grad()
        x, y = (torch.from_numpy(a).to(self.device, non_blocking=True) for a in (x, y))
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def add_histogram_hooks(self) -> None:
        """What a PyTorch user does for W4b: numpy histograms of weights and gradients."""
        self.hists = 0

        def hist(p: Any) -> None:
            np.histogram(p.grad.numpy(), bins=30)
            np.histogram(p.detach().numpy(), bins=30)
            self.hists += 2

        for p in self.model.parameters():
            p.register_post_accumulate_grad_hook(hist)


def run(quick: bool, blocks: int) -> dict[str, Any]:
    weights = make_weights()
    batches = make_batches(4 if quick else 16)
    trajectories = check_trajectories("W1", FloorMLP, GradlogMLP, TorchMLP, weights, batches, 5)
    if quick:
        return {"W1": {"checked": trajectories}}
    results: dict[str, Any] = {}
    contenders = {"floor": cycler(FloorMLP(weights), batches),
                  "gradlog": cycler(GradlogMLP(weights), batches)}
    if torch_or_none() is not None:
        contenders["torch"] = cycler(TorchMLP(weights), batches)
    t = interleaved(contenders, blocks=blocks, per_block=PER_BLOCK)
    results["W1"] = _ratios(t, "median", target=("gradlog", "floor", 1.15))
    results["W4"] = hooks_overhead(weights, batches, blocks=max(blocks, 15))
    return results


def _ratios(t: dict, stat: str, target: tuple) -> dict[str, Any]:
    base = getattr(t[target[1]], stat)
    out: dict[str, Any] = {f"{k}_s": getattr(v, stat) for k, v in t.items()}
    for k, v in t.items():
        if k != target[1]:
            out[f"{k}/{target[1]}"] = getattr(v, stat) / base
    who, over, limit = target
    out["target"] = f"{who}/{over} <= {limit}"
    out["met"] = out[f"{who}/{over}"] <= limit
    out["stat"] = stat
    return out


def hooks_overhead(weights: list, batches: list, blocks: int) -> dict[str, Any]:
    plain, hooked = GradlogMLP(weights), GradlogMLP(weights)
    hooked.add_noop_hooks()
    contenders = {"plain": cycler(plain, batches), "hooks": cycler(hooked, batches)}
    torch = torch_or_none()
    if torch is not None:
        tp, th = TorchMLP(weights), TorchMLP(weights)
        th_model = th.model

        def fwd(m: Any, a: Any, o: Any) -> None:
            o.register_hook(lambda g: None)
        for m in th_model.modules():
            m.register_forward_hook(fwd)
        contenders["torch_plain"] = cycler(tp, batches)
        contenders["torch_hooks"] = cycler(th, batches)
    t = interleaved(contenders, blocks=blocks, per_block=3)
    out = _ratios({"plain": t["plain"], "hooks": t["hooks"]}, "min",
                  target=("hooks", "plain", 1.05))
    if "torch_hooks" in t:
        out["torch_hooks/torch_plain"] = t["torch_hooks"].min / t["torch_plain"].min
    return out
