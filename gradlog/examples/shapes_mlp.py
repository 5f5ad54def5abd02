"""An MLP on ``Shapes``: the same task without convolutions (no Grad-CAM layer)."""

from __future__ import annotations

from typing import Any

from gradlog import nn, optim
from gradlog.examples.shapes import loaders, probe_sets, shapes_data


def build(config: dict) -> dict[str, Any]:
    train, val = shapes_data(config)
    size = train.images.shape[-1]
    model = nn.Sequential(nn.Flatten(), nn.Linear(size * size, 256), nn.ReLU(),
                          nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, train.num_classes))
    optimizer = optim.SGD(model.parameters(), lr=float(config.get("lr", 0.05)), momentum=0.9)
    train_loader, val_loader = loaders(train, val, config)
    return {"model": model, "optimizer": optimizer, "loss_fn": nn.CrossEntropyLoss(),
            "train_loader": train_loader, "val_loader": val_loader,
            "probe_sets": probe_sets(val, config)}
