"""``Conv2d`` and ``Conv1d``: learned cross-correlations (im2col and one matmul per call)."""

from __future__ import annotations

from typing import Any

from ...autograd.tensor import Tensor
from ..functional.conv import conv1d, conv2d
from ._factory import check_device, empty_parameter, reset_weight_and_bias
from .module import Module

__all__ = ["Conv1d", "Conv2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _tuple(value: Any, n: int) -> tuple:
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    return value * n if len(value) == 1 and n > 1 else value


class _ConvNd(Module):
    """What Conv1d and Conv2d share: argument checks, parameters, init and repr."""

    _dims = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        check_device(device)
        n = self._dims
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        stride = _tuple(stride, n)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 "{'same', 'valid'}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        else:
            padding = _tuple(padding, n)
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {list(_PADDING_MODES)}, but got "
                             f"padding_mode='{padding_mode}'")
        if padding_mode != "zeros":
            raise NotImplementedError(f"padding_mode='{padding_mode}' is not supported by "
                                      "gradlog (only 'zeros')")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = _tuple(kernel_size, n), stride, padding
        self.dilation, self.groups = _tuple(dilation, n), groups
        self.output_padding, self.transposed = (0,) * n, False
        self.padding_mode = padding_mode
        self.weight = empty_parameter((out_channels, in_channels // groups) + self.kernel_size,
                                      dtype)
        if bias:
            self.bias = empty_parameter((out_channels,), dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default initialization (kaiming-uniform weight, fan-in bounded bias)."""
        reset_weight_and_bias(self.weight, self.bias)

    def extra_repr(self) -> str:
        n = self._dims
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv2d(_ConvNd):
    """2-d convolution over (N, C, H, W) or (C, H, W) input.

    Args:
        in_channels: channels of the input.
        out_channels: channels of the output.
        kernel_size: int or pair.
        stride: int or pair.
        padding: int, pair, ``'same'`` (stride 1 only) or ``'valid'``.
        dilation: int or pair.
        groups: split the channels into groups convolved separately.
        bias: learn a per-output-channel bias.
    """

    _dims = 2

    def forward(self, input: Tensor) -> Tensor:
        return conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                      self.groups)


class Conv1d(_ConvNd):
    """1-d convolution over (N, C, L) or (C, L) input (arguments as :class:`Conv2d`)."""

    _dims = 1

    def forward(self, input: Tensor) -> Tensor:
        return conv1d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                      self.groups)
