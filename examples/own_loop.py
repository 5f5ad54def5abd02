"""Plugins in your own training loop with ``gl.watch``: run ``python examples/own_loop.py``,
then ``tensorboard --logdir runs``.

The optimizer's step hooks, the end of each backward pass and the model's forward drive the
plugins; ``run.batch`` hands them the batch (the adversarial plugin needs the labels),
``run.epoch_end`` and ``run.validation_end`` announce what hooks cannot see.
"""

from __future__ import annotations

import sys
from collections import OrderedDict

import gradlog as gl
from gradlog import nn, optim
from gradlog.data import DataLoader, Shapes, TensorDataset
from gradlog.progress import Progress


def main(epochs: int = 3, n: int = 3000, logdir: str | None = None) -> float:
    """Train; returns the validation accuracy. Logs to ``logdir`` (default: a new
    ``runs/<time>_<host>``: a run directory holds one run)."""
    gl.manual_seed(0)
    train, val = Shapes(n, seed=0), Shapes(n // 5, seed=1)
    loader = DataLoader(TensorDataset(gl.from_numpy(train.images), gl.from_numpy(train.labels)),
                        batch_size=64, shuffle=True)
    model = nn.Sequential(OrderedDict([  # named layers: grad-norm/conv1, not grad-norm/0
        ("conv1", nn.Conv2d(1, 8, 3, padding=1)), ("bn1", nn.BatchNorm2d(8)),
        ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(8, 16, 3, padding=1)), ("bn2", nn.BatchNorm2d(16)),
        ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("conv3", nn.Conv2d(16, 32, 3, padding=1)), ("bn3", nn.BatchNorm2d(32)),
        ("relu3", nn.ReLU()), ("avgpool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()),
        ("fc", nn.Linear(32, 4))]))
    opt = optim.Adam(model.parameters(), lr=3e-3)
    probe_sets = {"probe": {"images": gl.from_numpy(val.images[:8]),
                            "labels": gl.from_numpy(val.labels[:8])}}
    plugins = ["nan-guard", "grad-clip:max_norm=2.0", "histogram:every=50", "grad-norm",
               "gradcam:every=50"]
    with gl.watch(model, opt, logdir=logdir, plugins=plugins, probe_sets=probe_sets) as run:
        for epoch in range(1, epochs + 1):
            model.train()
            progress = Progress(len(loader), f"epoch {epoch}/{epochs}")  # as gradlog train's
            for i, (x, y) in enumerate(loader, 1):
                x, y = run.batch(x, y)
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                run.log_scalar("train/loss", loss)
                progress.update(i, loss=loss.item())
            progress.close(loss=loss.item())
            model.eval()
            with gl.no_grad():
                pred = model(gl.from_numpy(val.images)).argmax(1)
            acc = float((pred == gl.from_numpy(val.labels)).float().mean().item())
            run.validation_end({"val/acc": acc})
            run.epoch_end()
    print(f"val/acc {acc:.4f}; view with: tensorboard --logdir {run.writer.get_logdir()}")
    return acc


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
