"""Small PyTorch models of the training patterns these tests cover, a float64 copy of a model
(the independent computation the logged values are compared with), and the logged values read
back from a run's event files with TensorBoard's own loader."""

from __future__ import annotations

import copy

import numpy as np
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


# -- training loops (test_training_loops.py) ----------------------------------------------
GRAD_TAGS = ("0.weight", "0.bias", "2.weight", "2.bias")


def small_mlp(seed: int = 0, width: int = 8) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 2))


def regression_batches(n: int, rows: int = 6, seed: int = 1) -> list:
    """``n`` batches (inputs (rows, 4), targets (rows, 2)) for the MLP of ``small_mlp``."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, 4, generator=g), torch.randn(rows, 2, generator=g))
            for _ in range(n)]


def grads64(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """Each parameter's ``.grad`` now, in float64."""
    return {n: p.grad.detach().double().numpy().copy() for n, p in model.named_parameters()}


def global_norm(grads: dict[str, np.ndarray]) -> float:
    """The 2-norm of every gradient together, by torch in float64."""
    return float(torch.linalg.vector_norm(
        torch.cat([torch.from_numpy(g).reshape(-1) for g in grads.values()])))


class Logged:
    """A run's event files as TensorBoard loads them."""

    def __init__(self, logdir) -> None:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        self.acc = EventAccumulator(str(logdir), size_guidance={
            "scalars": 0, "histograms": 0, "tensors": 0})
        self.acc.Reload()

    def scalars(self, tag: str) -> list[tuple[int, float]]:
        if tag not in self.acc.Tags()["scalars"]:
            return []
        return [(e.step, e.value) for e in self.acc.Scalars(tag)]

    def histograms(self, tag: str) -> list[tuple[int, object]]:
        if tag not in self.acc.Tags()["histograms"]:
            return []
        return [(e.step, e.histogram_value) for e in self.acc.Histograms(tag)]


def assert_histogram_of(histogram, values: np.ndarray) -> None:
    """A logged histogram summarises exactly ``values`` (count, extremes, sums in float64)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    assert histogram.num == v.size
    if v.min() < v.max():  # (values all equal are drawn as one bucket around them)
        np.testing.assert_allclose([histogram.min, histogram.max], [v.min(), v.max()],
                                   rtol=1e-6)
    np.testing.assert_allclose(histogram.sum, v.sum(), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(histogram.sum_squares, np.square(v).sum(), rtol=1e-5)
