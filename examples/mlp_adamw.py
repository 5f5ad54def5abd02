"""An example for ``gradlog train examples/mlp_adamw.py``: a file that defines
``build(config)``. An MLP on the built-in Shapes data, AdamW with a one-cycle schedule stepped
every batch, and the probe sets the probing plugins use.

    gradlog train examples/mlp_adamw.py --epochs 3 --lr 0.003 -p lr-monitor
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import gradlog as gl
from gradlog import nn, optim
from gradlog.data import DataLoader, Shapes, TensorDataset


@dataclass
class Options:
    """This file's own [train] settings (validated like the flags; misspellings are refused),
    and its own default for a common setting (lr)."""

    lr: float = field(default=3e-3, metadata={
        "help": "AdamW's learning rate (this file's default; --lr overrides it)", "min": 0,
        "min_open": True})
    train_size: int = field(default=4000, metadata={"help": "training images", "min": 1})
    val_size: int = field(default=800, metadata={"help": "validation images", "min": 1})


def build(config: dict) -> dict[str, Any]:
    seed = int(config.get("seed", 0))
    train = Shapes(int(config.get("train_size", Options.train_size)), seed=seed)
    val = Shapes(int(config.get("val_size", Options.val_size)), seed=seed + 1)
    size = train.images.shape[-1]
    model = nn.Sequential(OrderedDict([
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(size * size, 256)), ("gelu", nn.GELU()),
        ("dropout", nn.Dropout(0.1)), ("fc2", nn.Linear(256, train.num_classes))]))
    lr = float(config["lr"])
    optimizer = optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-2)
    train_loader = DataLoader(TensorDataset(gl.from_numpy(train.images),
                                            gl.from_numpy(train.labels)),
                              batch_size=int(config.get("batch_size", 64)), shuffle=True,
                              generator=gl.Generator().manual_seed(seed))
    val_loader = DataLoader(TensorDataset(gl.from_numpy(val.images), gl.from_numpy(val.labels)),
                            batch_size=256)
    scheduler = optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=lr, total_steps=int(config["epochs"]) * len(train_loader))
    probe = {"images": gl.from_numpy(val.images[:8]), "labels": gl.from_numpy(val.labels[:8])}
    return {"model": model, "optimizer": optimizer, "loss_fn": nn.CrossEntropyLoss(),
            "train_loader": train_loader, "val_loader": val_loader, "scheduler": scheduler,
            "scheduler_interval": "step", "probe_sets": {"probe": probe}}
