"""``DistributedSampler``: each rank's share of a dataset, as ``torch.utils.data``'s."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..autograd.random import Generator, rng

__all__ = ["DistributedSampler"]


class DistributedSampler:
    """The indices of ``dataset`` that rank ``rank`` of ``num_replicas`` reads in an epoch.

    One order is drawn for every rank alike (a permutation seeded with ``seed + epoch`` when
    ``shuffle``; call ``set_epoch`` at each epoch so the order changes), cut to a multiple of
    ``num_replicas`` (``drop_last``) or padded with its first indices, and rank r takes every
    ``num_replicas``-th index from position r. So the ranks' batches k together hold the same
    samples for any number of ranks when the per-rank batch size divides the global one.

    Args:
        num_replicas, rank: default to ``gradlog.distributed``'s world size and rank.
    """

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            from .. import distributed
            if num_replicas is None:
                num_replicas = distributed.get_world_size()
            if rank is None:
                rank = distributed.get_rank()
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be a positive integer, got {num_replicas!r}")
        if not isinstance(rank, int) or rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def indices(self) -> np.ndarray:
        """This rank's indices for the current epoch, in reading order."""
        n = len(self.dataset)
        if self.shuffle:
            order = rng(Generator().manual_seed(self.seed + self.epoch)).permutation(n)
        else:
            order = np.arange(n)
        if self.drop_last:
            order = order[:self.total_size]
        elif self.total_size > n:
            order = np.resize(order, self.total_size)  # repeats from the start
        return order[self.rank:self.total_size:self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` (with ``shuffle``, a different one per epoch)."""
        self.epoch = epoch

    def state_dict(self) -> dict:
        """The epoch: with the seed and the number of ranks, it gives the order."""
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict) -> None:
        self.epoch = int(state["epoch"])
