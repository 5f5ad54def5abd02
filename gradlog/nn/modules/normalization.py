"""``LayerNorm``: standardize over the trailing dimensions of each sample."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.tensor import Tensor
from .. import init
from ..functional.normalization import layer_norm
from ._factory import check_device, empty_parameter
from .module import Module

__all__ = ["LayerNorm"]


class LayerNorm(Module):
    """Standardize over the last ``len(normalized_shape)`` dimensions, then scale by
    ``weight`` (ones) and shift by ``bias`` (zeros) elementwise when ``elementwise_affine``.
    """

    def __init__(self, normalized_shape: Any, eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        check_device(device)
        if isinstance(normalized_shape, (int, np.integer)):
            normalized_shape = (int(normalized_shape),)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = empty_parameter(self.normalized_shape, dtype)
            if bias:
                self.bias = empty_parameter(self.normalized_shape, dtype)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")
