"""``Linear`` (y = x W^T + b, one fused node) and ``Identity``."""

from __future__ import annotations

from typing import Any

from ...autograd.ops.linalg import linear
from ...autograd.tensor import Tensor
from ._factory import check_device, empty_parameter, reset_weight_and_bias
from .module import Module

__all__ = ["Linear", "Identity"]


class Identity(Module):
    """Returns its input; accepts and ignores any constructor arguments (as PyTorch)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Any) -> Any:
        return input


class Linear(Module):
    """``y = x @ weight.T + bias`` over the last dimension of ``x``.

    Args:
        in_features: size of each input sample's last dimension.
        out_features: size of each output sample's last dimension.
        bias: learn an additive bias (default True).

    ``weight`` (out_features, in_features) and ``bias`` start uniform in
    [-1/sqrt(in_features), 1/sqrt(in_features)], PyTorch's default.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        check_device(device)
        self.in_features = in_features
        self.out_features = out_features
        self.weight = empty_parameter((out_features, in_features), dtype)
        if bias:
            self.bias = empty_parameter((out_features,), dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default initialization (kaiming-uniform weight, fan-in bounded bias)."""
        reset_weight_and_bias(self.weight, self.bias)

    def forward(self, input: Tensor) -> Tensor:
        return linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
