"""``embedding`` (rows of a weight matrix picked by integer indices) and ``one_hot``.

The embedding's gradient adds each output row back onto the row it came from (repeated
indices accumulate), skipping positions that hold ``padding_idx`` as PyTorch does.
"""

from __future__ import annotations

import numpy as np

from ...autograd.function import Op
from ...autograd.tensor import Tensor, array_of, wrap
from ._utils import shape_str

__all__ = ["embedding", "one_hot"]


def _keep(idx: np.ndarray, padding_idx: int | None) -> np.ndarray | None:
    return None if padding_idx is None else (idx != padding_idx)[..., None]


class Embedding(Op):
    node_name = "EmbeddingBackward0"

    @staticmethod
    def forward(ctx, weight, idx, padding_idx):
        ctx.save_for_backward(idx)
        ctx.padding_idx, ctx.rows = padding_idx, weight.shape[0]
        return np.take(weight, idx, axis=0)

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        return EmbeddingScatter.apply(g, array_of(idx), ctx.padding_idx, ctx.rows), None, None


class EmbeddingScatter(Op):
    """Sum each (non-padding) row of ``g`` into the weight row it was read from."""

    node_name = "EmbeddingDenseBackward0"

    @staticmethod
    def forward(ctx, g, idx, padding_idx, rows):
        dim = g.shape[-1]
        flat = g.reshape(-1, dim)
        keep = _keep(idx, padding_idx)
        if keep is not None:
            flat = flat * keep.reshape(-1, 1)
        out = np.zeros((rows, dim), dtype=g.dtype)
        np.add.at(out, idx.reshape(-1), flat)
        ctx.save_for_backward(idx)
        ctx.padding_idx = padding_idx
        return out

    @staticmethod
    def backward(ctx, h):
        (idx,) = ctx.saved_tensors
        return MaskedGather.apply(h, array_of(idx), ctx.padding_idx), None, None, None


class MaskedGather(Op):
    """The adjoint of :class:`EmbeddingScatter`: rows of ``h`` at ``idx``, zero at padding."""

    node_name = "EmbeddingDenseBackwardBackward0"

    @staticmethod
    def forward(ctx, h, idx, padding_idx):
        out = np.take(h, idx, axis=0)
        keep = _keep(idx, padding_idx)
        if keep is not None:
            out *= keep
        ctx.save_for_backward(idx)
        ctx.padding_idx, ctx.rows = padding_idx, h.shape[0]
        return out

    @staticmethod
    def backward(ctx, gg):
        (idx,) = ctx.saved_tensors
        return EmbeddingScatter.apply(gg, array_of(idx), ctx.padding_idx, ctx.rows), None, None


def check_indices(idx: np.ndarray, rows: int, what: str = "embedding") -> None:
    if idx.dtype.kind not in "iu":
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got {idx.dtype} instead "
                           f"(while checking arguments for {what})")
    if idx.size and (idx.min() < 0 or idx.max() >= rows):
        bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
        raise IndexError(f"index out of range in self: index {bad} is not in [0, {rows}) "
                         f"(the weight has {rows} rows)")


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """The rows of ``weight`` (num_embeddings, dim) selected by the integer ``input``;
    gradients at ``padding_idx`` positions are dropped."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse are not "
                                  "supported by gradlog")
    if array_of(weight).ndim != 2:
        raise RuntimeError(f"'weight' must be 2-D, got weight of size "
                           f"{shape_str(array_of(weight).shape)}")
    rows = array_of(weight).shape[0]
    idx = array_of(input) if isinstance(input, Tensor) else np.asarray(input)
    check_indices(idx, rows)
    if padding_idx is not None and padding_idx < 0:
        padding_idx += rows
    return Embedding.apply(weight, idx, padding_idx)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding with a new last dimension of ``num_classes`` (or max + 1)."""
    idx = array_of(tensor)
    if idx.dtype != np.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if idx.size and idx.min() < 0:
        raise RuntimeError(f"Class values must be non-negative (got {int(idx.min())}).")
    if num_classes == -1:
        num_classes = int(idx.max()) + 1 if idx.size else 0
    elif idx.size and idx.max() >= num_classes:
        raise RuntimeError(f"Class values must be smaller than num_classes (got "
                           f"{int(idx.max())} with num_classes={num_classes}).")
    out = np.zeros(idx.shape + (num_classes,), dtype=np.int64)
    np.put_along_axis(out, idx[..., None], 1, axis=-1)
    return wrap(out)
