"""A gradlog train FILE.py for the distributed tests: the shapes MLP, or with ``cnn = true`` a
small CNN with BatchNorm, and faults on demand. ``FAULT=kill:K`` (or ``raise:K``,
``sigterm:K``) makes rank 1 kill itself (raise; rank 0 sends SIGTERM to the launcher of
``--nproc``) at its K-th training loss."""

from __future__ import annotations

import os
import signal
from collections import OrderedDict
from dataclasses import dataclass, field

from gradlog import nn, optim
from gradlog.examples.shapes import loaders, shapes_data


@dataclass
class Options:
    train_size: int = field(default=256, metadata={"help": "training images", "min": 1})
    val_size: int = field(default=64, metadata={"help": "validation images", "min": 1})
    image_size: int = field(default=16, metadata={"help": "image side", "min": 8})
    two_object_size: int = field(default=1, metadata={"help": "unused", "min": 1})
    cnn: bool = field(default=False, metadata={"help": "the CNN with BatchNorm"})


def _rank() -> int:
    return int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))


def _launcher_pid() -> int:
    """The grandparent of this rank: the --nproc launcher (the process manager between)."""
    with open(f"/proc/{os.getppid()}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])


class FaultyLoss(nn.CrossEntropyLoss):
    def __init__(self, fault: str) -> None:
        super().__init__()
        self.kind, _, at = fault.partition(":")
        self.at, self.calls = int(at), 0

    def forward(self, output, target):
        if output.requires_grad:  # training steps only
            self.calls += 1
            if self.calls == self.at:
                if self.kind == "kill" and _rank() == 1:
                    os.kill(os.getpid(), signal.SIGKILL)
                if self.kind == "raise" and _rank() == 1:
                    raise RuntimeError("injected failure")
                if self.kind == "sigterm" and _rank() == 0:
                    os.kill(_launcher_pid(), signal.SIGTERM)
        return super().forward(output, target)


def model(options: Options, size: int, classes: int) -> nn.Module:
    if options.cnn:
        return nn.Sequential(OrderedDict([
            ("conv1", nn.Conv2d(1, 4, 3, padding=1)), ("bn1", nn.BatchNorm2d(4)),
            ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)), ("flatten", nn.Flatten()),
            ("fc", nn.Linear(4 * (size // 2) ** 2, classes))]))
    return nn.Sequential(OrderedDict([
        ("flatten", nn.Flatten()), ("fc1", nn.Linear(size * size, 32)), ("relu1", nn.ReLU()),
        ("fc2", nn.Linear(32, classes))]))


def build(config: dict) -> dict:
    options = Options(**{k: config[k] for k in Options.__dataclass_fields__ if k in config})
    train, val = shapes_data(config)
    net = model(options, train.images.shape[-1], train.num_classes)
    fault = os.environ.get("FAULT", "")
    train_loader, val_loader = loaders(train, val, config)
    return {"model": net,
            "optimizer": optim.SGD(net.parameters(), lr=float(config["lr"]), momentum=0.9),
            "loss_fn": FaultyLoss(fault) if fault else nn.CrossEntropyLoss(),
            "train_loader": train_loader, "val_loader": val_loader}
