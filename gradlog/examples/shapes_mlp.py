"""An MLP on ``Shapes``: the same task without convolutions (no Grad-CAM layer)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from gradlog import nn, optim
from gradlog.examples.shapes import Options, loaders, probe_sets, shapes_data

__all__ = ["Options", "build"]  # the shapes example's settings


def build(config: dict) -> dict[str, Any]:
    train, val = shapes_data(config)
    size = train.images.shape[-1]
    model = nn.Sequential(OrderedDict([
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(size * size, 256)), ("relu1", nn.ReLU()),
        ("fc2", nn.Linear(256, 128)), ("relu2", nn.ReLU()),
        ("fc3", nn.Linear(128, train.num_classes))]))
    optimizer = optim.SGD(model.parameters(), lr=float(config.get("lr", 0.05)), momentum=0.9)
    train_loader, val_loader = loaders(train, val, config)
    return {"model": model, "optimizer": optimizer, "loss_fn": nn.CrossEntropyLoss(),
            "train_loader": train_loader, "val_loader": val_loader,
            "probe_sets": probe_sets(val, config)}
