"""Loss layers over ``nn.functional``: ``MSELoss, L1Loss, CrossEntropyLoss, NLLLoss,
BCELoss, BCEWithLogitsLoss``. Class weights and ``pos_weight`` are buffers, so they are in
``state_dict`` and follow ``to(dtype)``, as in PyTorch."""

from __future__ import annotations

from ...autograd.tensor import Tensor
from .. import functional as F
from ..functional._utils import reduction_of
from .module import Module

__all__ = ["MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss"]


class _Loss(Module):
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = reduction_of(size_average, reduce, reduction)
        self.reduction = reduction


class _WeightedLoss(_Loss):
    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class MSELoss(_Loss):
    """Mean squared error (``reduction='mean'``, ``'sum'`` or ``'none'``)."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.l1_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """Cross-entropy of logits (N, C, ...) against class indices (N, ...) or probabilities
    (N, C, ...), with optional class ``weight``, ``ignore_index`` and ``label_smoothing``."""

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None,
                 ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of class indices given log-probabilities."""

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None,
                 ignore_index: int = -100, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class BCELoss(_WeightedLoss):
    """Binary cross-entropy of probabilities in [0, 1]."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy(input, target, weight=self.weight,
                                      reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of logits (stable for any magnitude); ``pos_weight`` scales the
    positive term per class."""

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean",
                 pos_weight: Tensor | None = None) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  pos_weight=self.pos_weight,
                                                  reduction=self.reduction)
