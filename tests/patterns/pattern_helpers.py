"""Helpers for the PyTorch training patterns: a small model, the watched plugins, and the
logged values read back from the run's event files with TensorBoard's own loader."""

from __future__ import annotations

import numpy as np
import torch

GRAD_TAGS = ("0.weight", "0.bias", "2.weight", "2.bias")


def small_model(seed: int = 0, width: int = 8) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 2))


def batches(n: int, rows: int = 6, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
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
