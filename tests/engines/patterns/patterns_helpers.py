"""Small PyTorch models of the training patterns these tests cover, and a float64 copy of a
model (the independent computation the logged values are compared with)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(4, 6, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        h = self.relu2(self.conv2(self.relu1(self.conv1(x))))
        return self.fc(h.mean(dim=(2, 3)))


def float64_copy(model):
    """A float64 copy of ``model`` (its own parameters, no hooks of the run)."""
    return copy.deepcopy(model).double()


def sgd_steps(model, opt, batches, call=None):
    """Plain steps of cross-entropy on ``batches`` of (x, y); ``call`` is what runs the model
    (default: the model)."""
    call = model if call is None else call
    for x, y in batches:
        opt.zero_grad()
        nn.functional.cross_entropy(call(x), y).backward()
        opt.step()


def batches(n, shape=(4, 1, 6, 6), classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g), torch.randint(0, classes, (shape[0],),
                                                             generator=g)) for _ in range(n)]


class DownSkip(nn.Module):
    """A U-Net-like block: returns ``(down, skip)``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x), x


class Patterns(nn.Module):
    """A reused ReLU, a block returning (down, skip), an LSTM and an attention layer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.relu = nn.ReLU()  # called twice per forward pass
        self.down = DownSkip()
        self.lstm = nn.LSTM(4, 5, batch_first=True)
        self.attn = nn.MultiheadAttention(5, 1, batch_first=True)
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        down, skip = self.down(self.relu(self.conv(x)))
        seq = self.relu(down).flatten(2).transpose(1, 2)  # (N, 9, 4)
        out, _ = self.lstm(seq)
        att, _ = self.attn(out, out, out)
        return self.head(att.mean(1)) + skip.mean()


def captured(model, x, names):
    """Every output of the named modules of ``model`` on ``x``, per call, as its own forward
    hooks see them: ``{(name, call): output}``."""
    seen: dict = {}
    handles = []
    for name in names:
        def hook(module, args, output, name=name):
            seen[(name, sum(1 for n, _ in seen if n == name))] = output
        handles.append(model.get_submodule(name).register_forward_hook(hook))
    model(x)
    for h in handles:
        h.remove()
    return seen
