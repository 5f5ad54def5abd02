"""Flatten parameters into one vector and back (e.g. for second-order methods or logging)."""

from __future__ import annotations

from collections.abc import Iterable

from ...autograd.ops.join import cat
from ...autograd.tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All ``parameters`` flattened and concatenated into one 1-d tensor (in the graph)."""
    return cat([p.view(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Point each parameter's ``.data`` at its slice of ``vec`` (sharing memory), in order."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected gradlog.Tensor, but got: {type(vec).__name__}")
    offset = 0
    for p in parameters:
        n = p.numel()
        p.data = vec[offset:offset + n].view_as(p).data
        offset += n
