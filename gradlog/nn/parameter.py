"""``nn.Parameter``: a leaf tensor that a Module registers as one of its parameters."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..autograd.tensor import Tensor, array_of, init_leaf


class Parameter(Tensor):
    """A tensor that is a module parameter: assigning it to a Module attribute registers it.

    ``Parameter(t)`` shares ``t``'s memory and requires grad by default.
    """

    def __init__(self, data: Any = None, requires_grad: bool = True) -> None:
        if data is None:
            arr = np.zeros((0,), dtype=np.float32)
        elif isinstance(data, Tensor):
            arr = array_of(data)
        else:
            arr = np.asarray(data)
        init_leaf(self, arr)
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo: dict) -> Parameter:
        # As PyTorch: the values and requires_grad, not ``.grad`` (a plain tensor keeps it).
        new = Parameter(array_of(self).copy(), self.requires_grad)
        memo[id(self)] = new
        return new


class Buffer(Tensor):
    """Marks a tensor as a buffer when assigned to a Module attribute (``persistent`` or not)."""

    def __init__(self, data: Any = None, *, persistent: bool = True) -> None:
        arr = array_of(data) if isinstance(data, Tensor) else np.asarray(
            data if data is not None else np.zeros((0,), np.float32))
        init_leaf(self, arr)
        self.persistent = persistent
