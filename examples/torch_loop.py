"""Plugins in your own PyTorch training loop with ``gl.watch``: run
``python examples/torch_loop.py`` (needs ``pip install -e ".[torch]"``), then
``tensorboard --logdir runs``.

Any ``torch.nn.Module`` and ``torch.optim`` optimizer: the optimizer's step hooks, the end of
each backward pass into the model's parameters and the model's forward drive the plugins;
``run.batch`` hands them the batch (the adversarial plugin needs the labels).
"""

from __future__ import annotations

import sys
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import gradlog as gl
from gradlog.data import Shapes
from gradlog.progress import Progress

PLUGINS = ["histogram:every=50", "grad-norm", "grad-clip:max_norm=1.0", "nan-guard",
           "gradcam:layer=conv3,every=50", "adversarial:mode=fgsm,eval_size=100,eval_steps=10"]


def main(epochs: int = 3, n: int = 3000, logdir: str | None = None) -> list[float]:
    """Train; returns the mean training loss of each epoch. Logs to ``logdir`` (default: a
    new ``runs/<time>_<host>``: a run directory holds one run)."""
    torch.manual_seed(0)
    train, val = Shapes(n, seed=0), Shapes(n // 5, seed=1)
    loader = DataLoader(TensorDataset(torch.from_numpy(train.images),
                                      torch.from_numpy(train.labels)),
                        batch_size=64, shuffle=True)
    model = nn.Sequential(OrderedDict([  # named layers: grad-norm/conv1, not grad-norm/0
        ("conv1", nn.Conv2d(1, 8, 3, padding=1)), ("bn1", nn.BatchNorm2d(8)),
        ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(8, 16, 3, padding=1)), ("bn2", nn.BatchNorm2d(16)),
        ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("conv3", nn.Conv2d(16, 32, 3, padding=1)), ("bn3", nn.BatchNorm2d(32)),
        ("relu3", nn.ReLU()), ("avgpool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()),
        ("fc", nn.Linear(32, 4))]))
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    x_val, y_val = torch.from_numpy(val.images), torch.from_numpy(val.labels)
    probe_sets = {"probe": {"images": x_val[:8], "labels": y_val[:8]},
                  "validation": {"images": x_val, "labels": y_val}}
    epoch_losses = []
    with gl.watch(model, opt, logdir=logdir, plugins=PLUGINS, probe_sets=probe_sets) as run:
        for epoch in range(1, epochs + 1):
            model.train()
            losses = []
            progress = Progress(len(loader), f"epoch {epoch}/{epochs}")  # as gradlog train's
            for x, y in loader:
                x, y = run.batch(x, y)
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                run.log_scalar("train/loss", loss)
                losses.append(loss.item())
                progress.update(len(losses), loss=losses[-1])
            progress.close(loss=losses[-1])
            epoch_losses.append(sum(losses) / len(losses))
            model.eval()
            with torch.no_grad():
                acc = float((model(x_val).argmax(1) == y_val).float().mean())
            run.validation_end({"val/acc": acc})
            run.epoch_end()
    print(f"val/acc {acc:.4f}; view with: tensorboard --logdir {run.writer.get_logdir()}")
    return epoch_losses


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
