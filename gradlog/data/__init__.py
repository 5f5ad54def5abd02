"""Datasets and loading: ``Dataset``, ``TensorDataset``, ``Subset``, ``random_split``,
``DataLoader``, ``DistributedSampler`` (each rank's share), the built-in synthetic ``Shapes``
and the MNIST-format IDX reader/writer."""

from .dataloader import DataLoader, default_collate
from .dataset import Dataset, Subset, TensorDataset, random_split
from .distributed import DistributedSampler
from .idx import load_idx, save_idx
from .shapes import Shapes

__all__ = ["Dataset", "TensorDataset", "Subset", "DataLoader", "random_split",
           "default_collate", "Shapes", "load_idx", "save_idx", "DistributedSampler"]
