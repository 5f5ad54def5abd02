"""Datasets and loading: ``Dataset``, ``TensorDataset``, ``Subset``, ``random_split``,
``DataLoader``, the built-in synthetic ``Shapes`` and the MNIST-format IDX reader/writer."""

from typing import Any

from .dataloader import DataLoader, default_collate
from .dataset import Dataset, Subset, TensorDataset, random_split

__all__ = ["Dataset", "TensorDataset", "Subset", "DataLoader", "random_split",
           "default_collate", "Shapes", "load_idx", "save_idx"]

_LAZY = {"Shapes": "shapes", "load_idx": "idx", "save_idx": "idx"}


def __getattr__(name: str) -> Any:
    """``Shapes`` and the IDX functions are imported on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
