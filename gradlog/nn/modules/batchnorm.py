"""``BatchNorm1d`` and ``BatchNorm2d``: per-channel standardization with learned scale and
shift, and running statistics for evaluation."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.grad_mode import no_grad
from ...autograd.tensor import Tensor, wrap
from .. import init
from ..functional.normalization import batch_norm
from ._factory import check_device, empty_parameter, float_dtype
from .module import Module

__all__ = ["BatchNorm1d", "BatchNorm2d"]


class _BatchNorm(Module):
    """Shared by BatchNorm1d/2d (they differ only in the input ranks they accept).

    Args:
        num_features: the number of channels C (dim 1 of the input).
        eps: added to the variance for stability.
        momentum: weight of each new batch in the running statistics; None averages all
            batches seen so far equally.
        affine: learn ``weight`` (scale) and, with ``bias``, ``bias`` (shift).
        track_running_stats: keep ``running_mean``/``running_var``/``num_batches_tracked``
            buffers and use them in eval mode; otherwise batch statistics are always used.
    """

    _version = 2

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        check_device(device)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = empty_parameter((num_features,), dtype)
            if bias:
                self.bias = empty_parameter((num_features,), dtype)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            np_dtype = float_dtype(dtype)
            self.register_buffer("running_mean", wrap(np.zeros(num_features, np_dtype)))
            self.register_buffer("running_var", wrap(np.ones(num_features, np_dtype)))
            self.register_buffer("num_batches_tracked", wrap(np.array(0, dtype=np.int64)))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def _check_input_dim(self, input: Tensor) -> None:
        raise NotImplementedError

    def _factor(self) -> float:
        """The running statistics' update weight for this call (counts the batch)."""
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked.item())
        return factor

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        factor = self._factor()
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        use_buffers = not self.training or self.track_running_stats
        return batch_norm(input, self.running_mean if use_buffers else None,
                          self.running_var if use_buffers else None, self.weight, self.bias,
                          batch_stats, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) input (see :class:`BatchNorm2d`)."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D input of size "
                             f"{list(input.shape)})")


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) input: each channel is standardized with the
    batch's mean and (biased) variance in training, the running ones in eval mode."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input of size "
                             f"{list(input.shape)})")
