"""``cross_entropy`` and ``nll_loss``.

Cross-entropy with class indices is one node (log-softmax and the negative log-likelihood
fused), since it sits on every classifier's hot path: the forward is one log-sum-exp pass in
numpy (no overflow for logits of 1e4), the backward is ``(softmax * r - A) * scale`` with
tensor ops, where ``A`` holds each row's target weights (one-hot times the class weight,
spread by label smoothing) and ``r`` their row sums. The softmax enters through an op whose
forward returns the probabilities the forward already computed, so no work is repeated and
double backward still sees it as a function of the logits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.function import Op
from ...autograd.ops.activation import Softmax, log_softmax
from ...autograd.tensor import Tensor, wrap
from ._utils import reduce_loss, reduction_of, shape_str

__all__ = ["cross_entropy", "nll_loss"]


class _Probabilities(Softmax):
    """softmax(x) along dim 1, already computed: the forward just returns it."""

    @staticmethod
    def forward(ctx, x, probs):
        ctx.d = 1
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, g):
        return Softmax.backward(ctx, g)[0], None


class _Targets:
    """Per-row target data of a (M, C) problem: safe class indices, each row's weight (0 for
    ignored rows), the class weights, the label smoothing and the reduction."""

    __slots__ = ("index", "row_weight", "class_weight", "smoothing", "reduction", "denom")

    def __init__(self, index: np.ndarray, row_weight: np.ndarray, class_weight: Any,
                 smoothing: float, reduction: str) -> None:
        self.index, self.row_weight, self.class_weight = index, row_weight, class_weight
        self.smoothing, self.reduction = smoothing, reduction
        self.denom = float(row_weight.sum())  # 'mean' divides by the total target weight

    def coefficients(self, c: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """``A`` (M, C), the weight each logit's log-probability gets, and its row sums."""
        m, eps = self.index.shape[0], self.smoothing
        a = np.zeros((m, c), dtype=dtype)
        a[np.arange(m), self.index] = self.row_weight * (1.0 - eps)
        if eps:
            cw = self.class_weight if self.class_weight is not None else np.ones(c, dtype)
            a += (self.row_weight != 0)[:, None] * (cw * (eps / c)).astype(dtype)
        return a, a.sum(1, keepdims=True)

    def reduce(self, per_row: np.ndarray) -> np.ndarray:
        if self.reduction == "none":
            return per_row
        total = per_row.sum()
        if self.reduction == "sum":
            return total
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / per_row.dtype.type(self.denom)

    def scaled(self, g: Tensor) -> Tensor:
        """The upstream gradient as a per-row factor (the mean's 1/denominator included)."""
        if self.reduction == "none":
            return g.reshape(-1, 1)
        if self.reduction == "mean":
            return g * (1.0 / self.denom if self.denom else 0.0)
        return g


class CrossEntropy(Op):
    node_name = "CrossEntropyLossBackward0"

    @staticmethod
    def forward(ctx, x, targets):
        shifted = x - x.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(axis=1, keepdims=True)
        lse = np.log(total)
        rows = np.arange(x.shape[0])
        per_row = (lse[:, 0] - shifted[rows, targets.index]) * targets.row_weight
        eps = targets.smoothing
        if eps:
            cw = targets.class_weight
            logp_sum = (shifted - lse).sum(1) if cw is None else (shifted - lse) @ cw
            per_row = per_row * (1.0 - eps) - (targets.row_weight != 0) * logp_sum * (
                eps / x.shape[1])
        if ctx.needs_input_grad[0]:
            e /= total
            ctx.probs, ctx.targets = e, targets
            ctx.save_for_backward(x)
        return targets.reduce(per_row.astype(x.dtype, copy=False))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        targets = ctx.targets
        probs = _Probabilities.apply(x, ctx.probs)
        a, r = targets.coefficients(ctx.probs.shape[1], ctx.probs.dtype)
        return (probs * wrap(r) - wrap(a)) * targets.scaled(g), None


class NllLoss(Op):
    node_name = "NllLossBackward0"

    @staticmethod
    def forward(ctx, logp, targets):
        rows = np.arange(logp.shape[0])
        per_row = -logp[rows, targets.index] * targets.row_weight
        ctx.targets, ctx.shape = targets, logp.shape
        return targets.reduce(per_row.astype(logp.dtype, copy=False))

    @staticmethod
    def backward(ctx, g):
        targets = ctx.targets
        a, _ = targets.coefficients(ctx.shape[1], g._data.dtype)
        return wrap(-a) * targets.scaled(g), None


def _class_rows(input: Tensor, target: Tensor, name: str) -> tuple[Tensor, np.ndarray]:
    """(M, C) logits and (M,) class indices: the class dimension (1, or 0 for a single
    sample) moved last and everything else flattened, after PyTorch's shape checks."""
    x, t = input, target._data
    if t.dtype.kind not in "iu":
        raise RuntimeError(f"{name}: class-index targets must be integers (int64), got "
                           f"{t.dtype}; a float target holding class probabilities must have "
                           f"the input's shape {shape_str(x._data.shape)}, got "
                           f"{shape_str(t.shape)}")
    if x._data.ndim == 1:
        if t.ndim != 0:
            raise RuntimeError(f"{name}: a 1-D input (one sample) needs a 0-D target, got "
                               f"target of size {shape_str(t.shape)}")
        return x.unsqueeze(0), t.reshape(1)
    n, c = x._data.shape[:2]
    if t.ndim == 0 or t.shape[0] != n:
        raise ValueError(f"Expected input batch_size ({n}) to match target batch_size "
                         f"({t.shape[0] if t.ndim else 0}).")
    expected = (n,) + x._data.shape[2:]
    if t.shape != expected:
        raise RuntimeError(f"Expected target size {shape_str(expected)}, got "
                           f"{shape_str(t.shape)}")
    if x._data.ndim > 2:
        x = x.movedim(1, -1).reshape(-1, c)
    return x, t.reshape(-1)


def _targets(x: Tensor, index: np.ndarray, weight: Tensor | None, ignore_index: int,
             smoothing: float, reduction: str) -> _Targets:
    c, dtype = x._data.shape[1], x._data.dtype
    valid = index != ignore_index
    bad = (index < 0) | (index >= c)
    bad &= valid
    if bad.any():
        t = int(index[bad][0])
        raise IndexError(f"Target {t} is out of bounds: class indices must be in [0, {c}) for "
                         f"input of shape {tuple(x._data.shape)}")
    safe = np.where(valid, index, 0)
    class_weight = None
    if weight is not None:
        if weight._data.shape != (c,):
            raise RuntimeError(f"weight tensor should be defined either for all {c} classes or "
                               f"no classes but got weight tensor of shape: "
                               f"{shape_str(weight._data.shape)}")
        class_weight = weight._data.astype(dtype, copy=False)
        row_weight = class_weight[safe] * valid
    else:
        row_weight = valid.astype(dtype)
    return _Targets(safe, row_weight, class_weight, smoothing, reduction)


def _probability_targets(input: Tensor, target: Tensor, weight: Tensor | None,
                         smoothing: float, reduction: str) -> Tensor:
    """Cross-entropy against class probabilities (same shape as the input), composed from
    differentiable ops so the target may require grad too."""
    if target._data.dtype.kind != "f":
        raise RuntimeError(f"Expected floating point type for target with class probabilities, "
                           f"got {target.dtype.legacy_name.removesuffix('Tensor')}")
    dim = 0 if input._data.ndim == 1 else 1
    c = input._data.shape[dim]
    q = target if not smoothing else target * (1.0 - smoothing) + smoothing / c
    terms = log_softmax(input, dim) * q
    if weight is not None:
        shape = (c,) + (1,) * (input._data.ndim - dim - 1)
        terms = terms * weight.reshape(shape)
    return reduce_loss(-terms.sum(dim), reduction)


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                  size_average: bool | None = None, ignore_index: int = -100,
                  reduce: bool | None = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy between logits (N, C, ...) and class indices (N, ...) or class
    probabilities (N, C, ...); ``weight`` rescales classes, ``ignore_index`` targets count
    for nothing, ``label_smoothing`` mixes the targets with the uniform distribution."""
    reduction = reduction_of(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if input._data.ndim == 0:
        raise RuntimeError("cross_entropy: input must have a class dimension, got a 0-D tensor")
    if target._data.shape == input._data.shape and target._data.dtype.kind == "f":
        return _probability_targets(input, target, weight, label_smoothing, reduction)
    if target._data.shape == input._data.shape and input._data.ndim > 1:
        return _probability_targets(input, target, weight, label_smoothing, reduction)
    x, index = _class_rows(input, target, "cross_entropy")
    targets = _targets(x, index, weight, ignore_index, label_smoothing, reduction)
    out = CrossEntropy.apply(x, targets)
    return out.reshape(target._data.shape) if reduction == "none" else out


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
             size_average: bool | None = None, ignore_index: int = -100,
             reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class indices given log-probabilities (N, C, ...)."""
    reduction = reduction_of(size_average, reduce, reduction)
    if input._data.ndim == 0:
        raise RuntimeError("nll_loss: input must have a class dimension, got a 0-D tensor")
    x, index = _class_rows(input, target, "nll_loss")
    targets = _targets(x, index, weight, ignore_index, 0.0, reduction)
    out = NllLoss.apply(x, targets)
    return out.reshape(target._data.shape) if reduction == "none" else out
