"""A PyTorch model under ``gradlog train``: run ``gradlog train examples/torch_cnn.py``
(needs ``pip install -e ".[torch]"``), then ``tensorboard --logdir runs``.

``build(config)`` returns a ``torch.nn.Module``, a ``torch.optim`` optimizer, a torch loss,
torch DataLoaders and a scheduler; gradlog picks its torch engine from the model's type, and
every plugin, checkpoint and ``--resume`` works as with gradlog's own engine. The data are the
built-in Shapes images as torch tensors (no download, no torchvision).

    gradlog train examples/torch_cnn.py --epochs 3 -p grad-clip:max_norm=1.0
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gradlog.data import Shapes


@dataclass
class Options:
    """This file's own [train] settings (validated like the flags; misspellings are refused),
    and its own default for a common setting (lr)."""

    lr: float = field(default=3e-3, metadata={
        "help": "AdamW's learning rate (this file's default; --lr overrides it)", "min": 0,
        "min_open": True})
    train_size: int = field(default=4000, metadata={"help": "training images", "min": 1})
    val_size: int = field(default=800, metadata={"help": "validation images", "min": 1})
    two_object_size: int = field(default=200, metadata={
        "help": "two-object images on which Grad-CAM's discrimination is measured", "min": 1})


def cnn(num_classes: int) -> nn.Module:
    """Conv-BatchNorm-ReLU blocks, global average pooling, a linear classifier (``conv3`` is
    the last conv: Grad-CAM's default layer)."""
    return nn.Sequential(OrderedDict([  # named layers: grad-norm/conv1, not grad-norm/0
        ("conv1", nn.Conv2d(1, 8, 3, padding=1)), ("bn1", nn.BatchNorm2d(8)),
        ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(8, 16, 3, padding=1)), ("bn2", nn.BatchNorm2d(16)),
        ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("conv3", nn.Conv2d(16, 32, 3, padding=1)), ("bn3", nn.BatchNorm2d(32)),
        ("relu3", nn.ReLU()), ("avgpool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()),
        ("fc", nn.Linear(32, num_classes))]))


def build(config: dict) -> dict[str, Any]:
    seed = int(config.get("seed", 0))
    train = Shapes(int(config.get("train_size", Options.train_size)), seed=seed)
    val = Shapes(int(config.get("val_size", Options.val_size)), seed=seed + 1)
    two = Shapes(int(config.get("two_object_size", Options.two_object_size)), objects=2,
                 seed=seed + 2)
    t = torch.from_numpy
    model = cnn(train.num_classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(config["lr"]),
                                  weight_decay=1e-4)
    train_loader = DataLoader(TensorDataset(t(train.images), t(train.labels)),
                              batch_size=int(config.get("batch_size", 64)), shuffle=True,
                              generator=torch.Generator().manual_seed(seed))
    val_loader = DataLoader(TensorDataset(t(val.images), t(val.labels)), batch_size=256)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer,
                                                           T_max=int(config["epochs"]))
    probe_sets = {
        "probe": {"images": t(val.images[:8]), "labels": t(val.labels[:8])},
        "two_object": {"images": t(two.images), "labels": t(two.labels), "masks": two.masks},
        "validation": {"images": t(val.images), "labels": t(val.labels)},
    }
    return {"model": model, "optimizer": optimizer, "loss_fn": nn.CrossEntropyLoss(),
            "train_loader": train_loader, "val_loader": val_loader, "scheduler": scheduler,
            "probe_sets": probe_sets}
