"""Losses over class scores: ``cross_entropy`` and ``nll_loss``.

Cross-entropy with class indices is one node (log-softmax and the negative log-likelihood
fused), since it sits on every classifier's hot path: the forward is one log-sum-exp pass in
numpy (no overflow for logits of 1e4) that keeps the softmax; the backward is one more node,
``(softmax * r - A) * scale``, where ``A`` holds each row's target weights (one-hot times the
class weight, spread by label smoothing) and ``r`` their row sums. That node computes its
value from the kept softmax in one numpy expression, and its own gradient with tensor ops, so
double backward works.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.function import Op
from ...autograd.ops.activation import Softmax, log_softmax
from ...autograd.tensor import Tensor, array_of, wrap
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
    """The targets of an (M, C) problem: safe class indices, which rows count (``valid``,
    None when all do), each row's weight (None when all are 1), the class weights, label
    smoothing and reduction."""

    __slots__ = ("index", "rows", "valid", "row_weight", "class_weight", "smoothing",
                 "reduction", "denom")

    def __init__(self, index: np.ndarray, valid: np.ndarray | None,
                 row_weight: np.ndarray | None, class_weight: Any, smoothing: float,
                 reduction: str) -> None:
        self.index, self.rows, self.valid = index, np.arange(index.shape[0]), valid
        self.row_weight, self.class_weight = row_weight, class_weight
        self.smoothing, self.reduction = smoothing, reduction
        # 'mean' divides by the total weight of the rows that count
        self.denom = float(index.shape[0] if row_weight is None else row_weight.sum())

    def weights(self, dtype: np.dtype) -> np.ndarray:
        if self.row_weight is None:
            return np.ones(self.index.shape[0], dtype)
        return self.row_weight

    def _spread(self, c: int, dtype: np.dtype) -> np.ndarray:
        """Label smoothing's share of each class for each counted row, (M, C)."""
        cw = self.class_weight if self.class_weight is not None else np.ones(c, dtype)
        share = (cw * (self.smoothing / c)).astype(dtype)
        if self.valid is None:
            return np.broadcast_to(share, (self.index.shape[0], c))
        return self.valid[:, None] * share

    def coefficients(self, c: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """``A`` (M, C), the weight each logit's log-probability gets, and its row sums."""
        m = self.index.shape[0]
        a = self._spread(c, dtype).copy() if self.smoothing else np.zeros((m, c), dtype)
        a[self.rows, self.index] += self.weights(dtype) * (1.0 - self.smoothing)
        return a, a.sum(1, keepdims=True)

    def reduce(self, per_row: np.ndarray) -> np.ndarray:
        if self.reduction == "none":
            return per_row
        total = per_row.sum()
        if self.reduction == "sum":
            return total
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / per_row.dtype.type(self.denom)

    def factor(self) -> float:
        """The constant the reduction puts in front of each row's loss (0 when no row
        counts: the loss is NaN then, and PyTorch's gradient is 0)."""
        if self.reduction == "mean":
            return 1.0 / self.denom if self.denom else 0.0
        return 1.0

    def row_scale(self, g: np.ndarray) -> np.ndarray:
        """The upstream gradient as a per-row factor, reduction constant included."""
        return g.reshape(-1, 1) if self.reduction == "none" else g * g.dtype.type(self.factor())


class CrossEntropy(Op):
    node_name = "CrossEntropyLossBackward0"

    @staticmethod
    def forward(ctx, x, targets):
        shifted = x - x.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(axis=1, keepdims=True)
        lse = np.log(total)
        per_row = lse[:, 0] - shifted[targets.rows, targets.index]
        if targets.row_weight is not None:
            per_row *= targets.row_weight
        eps = targets.smoothing
        if eps:
            cw = targets.class_weight
            logp = shifted - lse
            logp_sum = logp.sum(1) if cw is None else logp @ cw
            if targets.valid is not None:
                logp_sum *= targets.valid
            per_row = per_row * (1.0 - eps) - logp_sum * (eps / x.shape[1])
        if ctx.needs_input_grad[0]:
            e /= total
            ctx.save_for_backward(x, e, targets)
        return targets.reduce(per_row.astype(x.dtype, copy=False))

    @staticmethod
    def backward(ctx, g):
        x, probs, targets = ctx.saved_tensors
        return CrossEntropyGrad.apply(x, g, array_of(probs), targets), None


class CrossEntropyGrad(Op):
    """d loss / d logits = (softmax * r - A) * scale(g), from the forward's softmax."""

    node_name = "CrossEntropyLossBackwardBackward0"

    @staticmethod
    def forward(ctx, x, g, probs, targets):
        s = targets.row_scale(g)
        eps, c = targets.smoothing, probs.shape[1]
        if eps or targets.row_weight is not None:
            weight = targets.weights(probs.dtype) * (1.0 - eps)
            if eps:
                spread = targets._spread(c, probs.dtype)
                out = probs * (weight[:, None] + spread.sum(1, keepdims=True)) - spread
            else:
                out = probs * weight[:, None]
            out[targets.rows, targets.index] -= weight
            out *= s
        else:  # every row counts with weight 1: (softmax - one_hot) * s
            out = probs * s
            out[targets.rows, targets.index] -= s if s.ndim == 0 else s[:, 0]
        ctx.save_for_backward(x, g, probs, targets)
        return out

    @staticmethod
    def backward(ctx, h):
        x, g, probs, t = ctx.saved_tensors
        nx, ng, _, _ = ctx.needs_input_grad
        probs = array_of(probs)
        a, r = t.coefficients(probs.shape[1], probs.dtype)
        p = _Probabilities.apply(x, probs)
        gx = gg = None
        if nx:
            s = g.reshape(-1, 1) if t.reduction == "none" else g * t.factor()
            u = h * wrap(r) * s
            gx = p * (u - (u * p).sum(1, keepdim=True))
        if ng:
            d = h * (p * wrap(r) - wrap(a))
            gg = d.sum(1) if t.reduction == "none" else d.sum() * t.factor()
        return gx, gg, None, None


class NllLoss(Op):
    node_name = "NllLossBackward0"

    @staticmethod
    def forward(ctx, logp, targets):
        per_row = -logp[targets.rows, targets.index]
        if targets.row_weight is not None:
            per_row *= targets.row_weight
        ctx.save_for_backward(targets)
        ctx.shape = logp.shape
        return targets.reduce(per_row.astype(logp.dtype, copy=False))

    @staticmethod
    def backward(ctx, g):
        (targets,) = ctx.saved_tensors
        a, _ = targets.coefficients(ctx.shape[1], array_of(g).dtype)
        s = g.reshape(-1, 1) if targets.reduction == "none" else g * targets.factor()
        return wrap(-a) * s, None


def _class_rows(input: Tensor, target: Tensor, name: str) -> tuple[Tensor, np.ndarray]:
    """(M, C) logits and (M,) class indices: the class dimension (1, or 0 for a single
    sample) moved last and everything else flattened, after PyTorch's shape checks."""
    x, t = input, array_of(target)
    if t.dtype.kind not in "iu":
        raise RuntimeError(f"{name}: class-index targets must be integers (int64), got "
                           f"{t.dtype}; a float target holding class probabilities must have "
                           f"the input's shape {shape_str(array_of(x).shape)}, got "
                           f"{shape_str(t.shape)}")
    if array_of(x).ndim == 1:
        if t.ndim != 0:
            raise RuntimeError(f"{name}: a 1-D input (one sample) needs a 0-D target, got "
                               f"target of size {shape_str(t.shape)}")
        return x.unsqueeze(0), t.reshape(1)
    n, c = array_of(x).shape[:2]
    if t.ndim == 0 or t.shape[0] != n:
        raise ValueError(f"Expected input batch_size ({n}) to match target batch_size "
                         f"({t.shape[0] if t.ndim else 0}).")
    expected = (n,) + array_of(x).shape[2:]
    if t.shape != expected:
        raise RuntimeError(f"Expected target size {shape_str(expected)}, got "
                           f"{shape_str(t.shape)}")
    if array_of(x).ndim > 2:
        x = x.movedim(1, -1).reshape(-1, c)
    return x, t.reshape(-1)


def _targets(x: Tensor, index: np.ndarray, weight: Tensor | None, ignore_index: int,
             smoothing: float, reduction: str) -> _Targets:
    c, dtype = array_of(x).shape[1], array_of(x).dtype
    if index.size and 0 <= index.min() and index.max() < c and not 0 <= ignore_index < c:
        valid, safe = None, index  # the common case: every target counts
    else:
        valid = index != ignore_index
        bad = (index < 0) | (index >= c)
        bad &= valid
        if bad.any():
            t = int(index[bad][0])
            raise IndexError(f"Target {t} is out of bounds: class indices must be in [0, {c}) "
                             f"for input of shape {tuple(array_of(x).shape)}")
        safe = np.where(valid, index, 0)
    class_weight = None
    if weight is not None:
        if array_of(weight).shape != (c,):
            raise RuntimeError(f"weight tensor should be defined either for all {c} classes or "
                               f"no classes but got weight tensor of shape: "
                               f"{shape_str(array_of(weight).shape)}")
        class_weight = array_of(weight).astype(dtype, copy=False)
        row_weight = class_weight[safe]
        if valid is not None:
            row_weight = row_weight * valid
    else:
        row_weight = None if valid is None else valid.astype(dtype)
    return _Targets(safe, valid, row_weight, class_weight, smoothing, reduction)


def _probability_targets(input: Tensor, target: Tensor, weight: Tensor | None,
                         smoothing: float, reduction: str) -> Tensor:
    """Cross-entropy against class probabilities (same shape as the input), composed from
    differentiable ops so the target may require grad too."""
    if array_of(target).dtype.kind != "f":
        raise RuntimeError(f"Expected floating point type for target with class probabilities, "
                           f"got {target.dtype.legacy_name.removesuffix('Tensor')}")
    dim = 0 if array_of(input).ndim == 1 else 1
    c = array_of(input).shape[dim]
    q = target if not smoothing else target * (1.0 - smoothing) + smoothing / c
    terms = log_softmax(input, dim) * q
    if weight is not None:
        shape = (c,) + (1,) * (array_of(input).ndim - dim - 1)
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
    if array_of(input).ndim == 0:
        raise RuntimeError("cross_entropy: input must have a class dimension, got a 0-D tensor")
    if array_of(target).shape == array_of(input).shape and array_of(target).dtype.kind == "f":
        return _probability_targets(input, target, weight, label_smoothing, reduction)
    if array_of(target).shape == array_of(input).shape and array_of(input).ndim > 1:
        return _probability_targets(input, target, weight, label_smoothing, reduction)
    x, index = _class_rows(input, target, "cross_entropy")
    targets = _targets(x, index, weight, ignore_index, label_smoothing, reduction)
    out = CrossEntropy.apply(x, targets)
    return out.reshape(array_of(target).shape) if reduction == "none" else out


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
             size_average: bool | None = None, ignore_index: int = -100,
             reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class indices given log-probabilities (N, C, ...)."""
    reduction = reduction_of(size_average, reduce, reduction)
    if array_of(input).ndim == 0:
        raise RuntimeError("nll_loss: input must have a class dimension, got a 0-D tensor")
    x, index = _class_rows(input, target, "nll_loss")
    targets = _targets(x, index, weight, ignore_index, 0.0, reduction)
    out = NllLoss.apply(x, targets)
    return out.reshape(array_of(target).shape) if reduction == "none" else out
