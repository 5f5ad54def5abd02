"""``Embedding``: a lookup table of learned vectors indexed by integers."""

from __future__ import annotations

from typing import Any

from ...autograd.grad_mode import no_grad
from ...autograd.tensor import Tensor
from .. import init
from ..functional.sparse import embedding
from ..parameter import Parameter
from ._factory import check_device, empty_parameter
from .module import Module

__all__ = ["Embedding"]


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim), initialized N(0, 1), picked by an
    integer tensor of any shape. The ``padding_idx`` row starts at zero and gets no gradient.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False,
                 _weight: Tensor | None = None, _freeze: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        check_device(device)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError(f"Padding_idx must be within num_embeddings (got "
                                     f"padding_idx={padding_idx}, num_embeddings="
                                     f"{num_embeddings})")
            padding_idx %= num_embeddings
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError("Embedding: max_norm, scale_grad_by_freq and sparse are "
                                      "not supported by gradlog")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx, self.max_norm, self.norm_type = padding_idx, max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = empty_parameter((num_embeddings, embedding_dim), dtype)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise AssertionError("Shape of weight does not match num_embeddings and "
                                     "embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx].fill_(0)

    def forward(self, input: Tensor) -> Tensor:
        return embedding(input, self.weight, self.padding_idx)

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True,
                        padding_idx: int | None = None, **kwargs: Any) -> Embedding:
        """An Embedding holding ``embeddings`` (2-D); frozen (no gradient) by default."""
        if embeddings.dim() != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, _weight=embeddings, _freeze=freeze, **kwargs)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s
