"""``Flatten`` and ``Unflatten``: reshape between convolutional and dense layers."""

from __future__ import annotations

import math
from typing import Any

from ...autograd.tensor import Tensor
from .module import Module

__all__ = ["Flatten", "Unflatten"]


class Flatten(Module):
    """Merge dimensions ``start_dim``..``end_dim`` (by default all but the batch one)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dimension ``dim`` into ``unflattened_size``."""

    def __init__(self, dim: int | str, unflattened_size: Any) -> None:
        super().__init__()
        if not isinstance(dim, int):
            raise TypeError(f"invalid argument type for dim parameter: {type(dim).__name__} "
                            "(gradlog has no named dimensions)")
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        sizes = self.unflattened_size
        if -1 not in sizes and input.dim():
            n = input.shape[self.dim]
            if math.prod(sizes) != n:
                raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up "
                                   f"to the size of dim {self.dim} ({n}) in the input tensor")
        return input.unflatten(self.dim, sizes)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
