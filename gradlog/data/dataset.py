"""Datasets with PyTorch's names: ``Dataset``, ``TensorDataset``, ``Subset``, ``random_split``.

A map-style dataset is anything with ``__len__`` and ``__getitem__(index)``. Datasets backed by
whole arrays also tell the ``DataLoader`` how to fetch a batch with one fancy index (see
:func:`batch_arrays`), which is what makes loading fast in pure Python.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import numpy as np

from ..autograd.creation import randperm
from ..autograd.random import Generator
from ..autograd.tensor import Tensor

__all__ = ["Dataset", "TensorDataset", "Subset", "random_split", "batch_arrays"]


class Dataset:
    """Base class of map-style datasets: subclasses define ``__getitem__`` and ``__len__``."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")


class TensorDataset(Dataset):
    """Sample ``i`` is ``tuple(t[i] for t in tensors)``; all tensors share their first size."""

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors or any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ValueError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Any, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset: Any, lengths: Sequence[int | float],
                 generator: Generator | None = None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random subsets of the given ``lengths``.

    ``lengths`` may be fractions summing to 1: each subset then gets ``floor(n * fraction)``
    samples and the remainder is dealt out one by one from the first subset, as PyTorch does.
    The permutation comes from ``generator`` (the default generator if None).
    """
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            counts.append(int(math.floor(n * frac)))
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, count in enumerate(counts):
            if count == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an "
                              "empty dataset.", stacklevel=2)
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = randperm(sum(lengths), generator=generator).tolist()
    return [Subset(dataset, perm[end - length:end])
            for end, length in zip(accumulate(lengths), lengths)]


def batch_arrays(dataset: Any) -> tuple[tuple[np.ndarray, ...], np.ndarray | None] | None:
    """How to fetch a whole batch of ``dataset`` at once, or None if it must go item by item.

    Returns ``(arrays, index_map)``: sample ``i`` is ``tuple(a[index_map[i]] for a in
    arrays)`` (``index_map`` None means the identity). Recognised:

    * a :class:`TensorDataset` (its tensors' arrays);
    * a dataset with numpy attributes ``images`` and ``labels`` of its length whose items are
      ``(images[i], labels[i])`` -- such as the built-in ``Shapes`` -- unless it declares a
      ``transform`` or ``target_transform`` (item 0 is compared to make sure);
    * a :class:`Subset` of either (the index map composes).
    """
    if isinstance(dataset, Subset):
        inner = batch_arrays(dataset.dataset)
        if inner is None:
            return None
        arrays, index_map = inner
        indices = np.asarray(dataset.indices, dtype=np.int64)
        return arrays, (indices if index_map is None else index_map[indices])
    if isinstance(dataset, TensorDataset):
        return tuple(np.asarray(t) for t in dataset.tensors), None
    images = getattr(dataset, "images", None)
    labels = getattr(dataset, "labels", None)
    if not (isinstance(images, np.ndarray) and isinstance(labels, np.ndarray)):
        return None
    if getattr(dataset, "transform", None) is not None or getattr(
            dataset, "target_transform", None) is not None:
        return None
    n = len(dataset)
    if len(images) != n or len(labels) != n:
        return None
    if n and not _same_item(dataset[0], (images[0], labels[0])):
        return None
    return (images, labels), None


def _same_item(item: Any, expected: tuple) -> bool:
    if not isinstance(item, tuple) or len(item) != len(expected):
        return False
    return all(isinstance(a, (np.ndarray, np.generic)) and np.asarray(a).dtype == b.dtype
               and np.array_equal(a, b) for a, b in zip(item, expected))
