"""A PyTorch gradlog train FILE.py for the distributed tests; ``FAULT=kill:K`` makes rank 1
kill itself at its K-th training loss."""

from __future__ import annotations

import os
import signal

import torch
from torch import nn


class FaultyLoss(nn.CrossEntropyLoss):
    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls = at, 0

    def forward(self, output, target):
        if output.requires_grad:
            self.calls += 1
            if self.calls == self.at and int(os.environ.get("RANK", "0")) == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().forward(output, target)


def build(config):
    g = torch.Generator().manual_seed(5)
    x = torch.rand(96, 1, 8, 8, generator=g)
    y = (x.mean(dim=(1, 2, 3)) > 0.5).long() + 2 * (x[:, 0, 0, 0] > 0.5).long()
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 8 * 8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=float(config["lr"]), momentum=0.9)
    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=int(config["batch_size"]),
                                         shuffle=True,
                                         generator=torch.Generator().manual_seed(1))
    fault = os.environ.get("FAULT", "")
    return {"model": model, "optimizer": opt,
            "loss_fn": FaultyLoss(int(fault.partition(":")[2])) if fault else
            nn.CrossEntropyLoss(),
            "train_loader": loader,
            "val_loader": torch.utils.data.DataLoader(data, batch_size=48)}
