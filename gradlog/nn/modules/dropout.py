"""``Dropout``: random zeroing during training, identity in eval mode."""

from __future__ import annotations

from ...autograd.tensor import Tensor
from ..functional.regularization import dropout
from .module import Module

__all__ = ["Dropout"]


class Dropout(Module):
    """Zero each element with probability ``p`` in training mode and scale the others by
    1/(1-p), so eval mode (identity) needs no rescaling. Masks come from the default
    generator: ``gl.manual_seed`` makes them reproducible."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input: Tensor) -> Tensor:
        return dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
