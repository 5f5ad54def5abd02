"""The default example: a small CNN that learns to tell circles, squares, triangles and
crosses apart on the built-in ``Shapes`` data (no download), with probe sets for Grad-CAM."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import gradlog as gl
from gradlog import nn, optim
from gradlog.data import DataLoader, Shapes, TensorDataset


@dataclass
class Options:
    """This example's own settings (``[train]`` keys), besides epochs, batch_size, lr, seed."""

    train_size: int = field(default=6000, metadata={"help": "training images", "min": 1})
    val_size: int = field(default=1000, metadata={"help": "validation images", "min": 1})
    image_size: int = field(default=32, metadata={"help": "image side in pixels", "min": 8})
    two_object_size: int = field(default=200, metadata={
        "help": "two-object images on which Grad-CAM's discrimination is measured", "min": 1})


def options(config: dict) -> Options:
    """The example's settings in ``config``, defaults for the others (``build`` also takes a
    partial config, as tests call it)."""
    return Options(**{k: config[k] for k in Options.__dataclass_fields__ if k in config})


def shapes_data(config: dict) -> tuple[Shapes, Shapes]:
    seed = int(config.get("seed", 0))
    o = options(config)
    train = Shapes(o.train_size, size=o.image_size, seed=seed)
    val = Shapes(o.val_size, size=o.image_size, seed=seed + 10_000)
    return train, val


def loaders(train: Shapes, val: Shapes, config: dict) -> tuple[DataLoader, DataLoader]:
    batch = int(config.get("batch_size", 64))
    seed = int(config.get("seed", 0))
    train_loader = DataLoader(TensorDataset(gl.from_numpy(train.images),
                                            gl.from_numpy(train.labels)),
                              batch_size=batch, shuffle=True,
                              generator=gl.Generator().manual_seed(seed))
    val_loader = DataLoader(TensorDataset(gl.from_numpy(val.images), gl.from_numpy(val.labels)),
                            batch_size=256)
    return train_loader, val_loader


def probe_sets(val: Shapes, config: dict) -> dict:
    """Fixed images for probing plugins: 8 validation images, and 200 two-object images with
    masks on which Grad-CAM's class discrimination is measured."""
    seed = int(config.get("seed", 0))
    two = Shapes(options(config).two_object_size, size=val.images.shape[-1], objects=2,
                 seed=seed + 20_000)
    return {
        "probe": {"images": gl.from_numpy(val.images[:8]), "labels": gl.from_numpy(val.labels[:8])},
        "two_object": {"images": gl.from_numpy(two.images), "labels": gl.from_numpy(two.labels),
                       "masks": two.masks},
        "validation": {"images": gl.from_numpy(val.images), "labels": gl.from_numpy(val.labels)},
    }


def cnn(num_classes: int) -> nn.Module:
    """Three 3x3 conv blocks (BatchNorm, ReLU; a 2x2 max-pool after the first two), global
    average pooling and a linear classifier, named as a PyTorch user names them (``conv1``,
    ``bn1``, ``relu1``, ``pool1``, ..., ``fc``): tags read ``grad-norm/conv1``.

    Why this shape: the last conv (``conv3``, Grad-CAM's default layer) keeps an 8x8 map
    whose every position the classifier reads through the average, so the Grad-CAM of a class
    is its evidence map (CAM up to a constant); with a flatten + linear head the map localises
    poorly. BatchNorm lets SGD at lr 0.05 train it to >99% in three epochs; without it the
    same run stays at chance. 8/16/32 channels keep ``gradlog train`` well under a minute.
    """
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(1, 8, 3, padding=1)), ("bn1", nn.BatchNorm2d(8)),
        ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(8, 16, 3, padding=1)), ("bn2", nn.BatchNorm2d(16)),
        ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
        ("conv3", nn.Conv2d(16, 32, 3, padding=1)), ("bn3", nn.BatchNorm2d(32)),
        ("relu3", nn.ReLU()),
        ("avgpool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()),
        ("fc", nn.Linear(32, num_classes)),
    ]))


def build(config: dict) -> dict[str, Any]:
    """The CNN, SGD with momentum and a per-step cosine learning-rate decay (to 0 at the last
    step), cross-entropy, loaders and probe sets."""
    train, val = shapes_data(config)
    model = cnn(train.num_classes)
    optimizer = optim.SGD(model.parameters(), lr=float(config.get("lr", 0.05)), momentum=0.9)
    train_loader, val_loader = loaders(train, val, config)
    steps = len(train_loader) * int(config.get("epochs", 3))
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(steps, 1))
    return {"model": model, "optimizer": optimizer, "loss_fn": nn.CrossEntropyLoss(),
            "train_loader": train_loader, "val_loader": val_loader,
            "scheduler": scheduler, "scheduler_interval": "step",
            "probe_sets": probe_sets(val, config)}
