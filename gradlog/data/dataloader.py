"""``DataLoader``: batches from a map-style dataset, reproducible shuffling, resumable position.

Shuffling draws one permutation per epoch from ``generator`` (or a generator seeded with
``seed``, or the default generator), so ``gl.manual_seed`` makes the batch order reproducible.
The loader remembers where it is -- epoch, batches consumed, the epoch's permutation -- and
``state_dict()`` / ``load_state_dict()`` carry that into a checkpoint: a run resumed mid-epoch
sees exactly the batches the uninterrupted run would have seen. With a ``sampler`` (such as
``DistributedSampler``), the epoch's order is the sampler's; a sampler with its own
``state_dict`` (``DistributedSampler``: its epoch) is checkpointed instead of the order, so the
order is drawn again on resume -- for another number of ranks too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..autograd.random import Generator, rng
from ..autograd.tensor import Tensor, wrap
from .dataset import batch_arrays

__all__ = ["DataLoader", "default_collate"]

_COLLATE_ERROR = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
                  "lists; found {}")


def default_collate(batch: Sequence[Any]) -> Any:
    """Merge a list of samples into a batch, as PyTorch's ``default_collate``.

    Tensors and numpy arrays are stacked into a tensor (dtype kept); Python floats become a
    float64 tensor, ints an int64 tensor, bools a bool tensor; strings stay a list; dicts,
    tuples and lists are collated field by field (tuples and lists give a list, named tuples
    their own type).
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        return wrap(np.stack([np.asarray(t) for t in batch]))
    if isinstance(elem, (np.ndarray, np.generic)) and not isinstance(elem, (np.str_, np.bytes_)):
        if np.asarray(elem).dtype.kind in "SaUO":
            raise TypeError(_COLLATE_ERROR.format(np.asarray(elem).dtype))
        return wrap(np.stack([np.asarray(a) for a in batch]))
    if isinstance(elem, bool):
        return wrap(np.array(batch, dtype=np.bool_))
    if isinstance(elem, int):
        return wrap(np.array(batch, dtype=np.int64))
    if isinstance(elem, float):
        return wrap(np.array(batch, dtype=np.float64))
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # named tuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(samples)) for samples in zip(*batch)]
    raise TypeError(_COLLATE_ERROR.format(type(elem)))


class DataLoader:
    """Iterate over ``dataset`` in batches.

    Args:
        dataset: a map-style dataset (``__len__`` and ``__getitem__``).
        batch_size: samples per batch.
        shuffle: draw a new random order every epoch.
        drop_last: drop the last batch if it is smaller than ``batch_size``.
        generator: the ``gl.Generator`` shuffling draws from (default: the global one).
        seed: shorthand for ``generator=gl.Generator().manual_seed(seed)``.
        collate_fn: merges a list of samples into a batch (default: :func:`default_collate`).
        sampler: the indices to read in an epoch, in order (e.g. a ``DistributedSampler``);
            exclusive with ``shuffle``.

    With the default collate, a ``TensorDataset``, a dataset exposing ``images``/``labels``
    arrays (such as ``Shapes``) or a ``Subset`` of one is batched with one fancy index per
    array instead of one ``__getitem__`` call per sample; the result is the same.
    """

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, generator: Generator | None = None,
                 seed: int | None = None, collate_fn: Callable[[list], Any] | None = None,
                 sampler: Any = None) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError("batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if seed is not None:
            if generator is not None:
                raise ValueError("DataLoader: pass either generator or seed, not both")
            generator = Generator().manual_seed(seed)
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        self.dataset = dataset
        self.sampler = sampler
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.generator = generator
        self.collate_fn = collate_fn if collate_fn is not None else default_collate
        self._arrays = batch_arrays(dataset) if collate_fn is None else None
        # position: the epoch being read (or next to read) and the batches consumed of it
        self._epoch = 0
        self._batch = 0
        self._order: np.ndarray | None = None
        self._started = False  # an iterator of self._epoch was created
        self._resume = False  # load_state_dict set a mid-epoch position for the next iter
        self._token = 0

    def _epoch_size(self) -> int:
        return len(self.sampler) if self.sampler is not None else len(self.dataset)

    def __len__(self) -> int:
        n = self._epoch_size()
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        if self._resume:
            self._resume = False
            if self._order is None and self.sampler is not None:
                self._order = self._sampled()  # drawn again from the restored sampler
        else:
            if self._started:
                self._epoch += 1
            if self.sampler is not None:
                self._order = self._sampled()
            elif self.shuffle:
                self._order = rng(self.generator).permutation(len(self.dataset))
            else:
                self._order = None
            self._batch = 0
        self._started = True
        self._token += 1
        return self._batches(self._token, self._order, self._batch)

    def _sampled(self) -> np.ndarray:
        return np.fromiter(iter(self.sampler), dtype=np.int64)

    def _batches(self, token: int, order: np.ndarray | None, start: int) -> Iterator[Any]:
        n, bs = self._epoch_size(), self.batch_size
        for b in range(start, len(self)):
            lo, hi = b * bs, min((b + 1) * bs, n)
            indices = order[lo:hi] if order is not None else np.arange(lo, hi)
            batch = self._fetch(indices)
            if token == self._token:
                self._batch = b + 1
            yield batch
        if token == self._token:
            self._epoch += 1
            self._batch = 0
            self._order = None
            self._started = False

    def _fetch(self, indices: np.ndarray) -> Any:
        if self._arrays is not None:
            arrays, index_map = self._arrays
            idx = indices if index_map is None else index_map[indices]
            return [wrap(a[idx]) for a in arrays]
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:  # PyTorch's batched-fetch protocol: a list of samples
            return self.collate_fn(getitems(indices.tolist()))
        return self.collate_fn([self.dataset[int(i)] for i in indices])

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The loader's position: ``epoch``, ``batch`` (batches of it already consumed), the
        epoch's ``permutation`` (None without shuffling or between epochs) and the state of the
        loader's own generator (None when shuffling uses the default generator, whose state a
        checkpoint saves with the other random states). With a sampler that has a
        ``state_dict``, that state (``sampler``) replaces the permutation."""
        in_epoch = self._started or self._resume
        stateful = callable(getattr(self.sampler, "state_dict", None))
        state = {
            "epoch": self._epoch,
            "batch": self._batch if in_epoch else 0,
            "permutation": (self._order.copy() if in_epoch and self._order is not None
                            and not stateful else None),
            "generator": (np.asarray(self.generator.get_state()).copy()
                          if self.generator is not None else None),
        }
        if stateful:
            state["sampler"] = self.sampler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a position saved by :meth:`state_dict`: the next ``iter()`` yields
        the rest of that epoch, in the same order."""
        perm = state.get("permutation")
        if perm is not None:
            perm = np.asarray(perm, dtype=np.int64)
            if perm.shape != (self._epoch_size(),):
                what = "the sampler yields" if self.sampler is not None else "the dataset has"
                raise ValueError(f"DataLoader.load_state_dict: the saved permutation has "
                                 f"{perm.size} indices but {what} {self._epoch_size()} samples")
        if state.get("sampler") is not None:
            if not callable(getattr(self.sampler, "load_state_dict", None)):
                raise ValueError("DataLoader.load_state_dict: the state holds a sampler state "
                                 "but this loader has no sampler that loads one")
            self.sampler.load_state_dict(state["sampler"])
        if self.shuffle and state["batch"] > 0 and perm is None:
            raise ValueError("DataLoader.load_state_dict: a shuffled loader needs the saved "
                             "permutation to resume mid-epoch")
        self._epoch = int(state["epoch"])
        self._batch = int(state["batch"])
        self._order = perm
        self._resume = self._batch > 0 or perm is not None
        self._started = False
        generator_state = state.get("generator")
        if generator_state is not None:
            if self.generator is None:
                raise ValueError("DataLoader.load_state_dict: the state holds a generator state "
                                 "but this loader shuffles with the default generator")
            self.generator.set_state(generator_state)

    def __repr__(self) -> str:
        return (f"DataLoader(dataset={self.dataset!r}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle}, drop_last={self.drop_last})")
