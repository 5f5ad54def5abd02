"""Creating parameters with a layer's ``dtype`` argument (float32 unless given)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...autograd import dtypes
from ..parameter import Parameter


def float_dtype(dtype: Any) -> np.dtype:
    if dtype is None:
        return dtypes.get_default_dtype().np
    np_dtype = dtypes.to_numpy_dtype(dtype)
    if np_dtype.kind != "f":
        raise TypeError(f"layers hold floating-point parameters, got dtype={dtype}")
    return np_dtype


def empty_parameter(shape: tuple, dtype: Any = None) -> Parameter:
    """A parameter of ``shape`` to be filled by the layer's ``reset_parameters``."""
    return Parameter(np.zeros(shape, dtype=float_dtype(dtype)))


def reset_weight_and_bias(weight: Parameter, bias: Parameter | None) -> None:
    """PyTorch's default for Linear and Conv layers: kaiming-uniform weights with a=sqrt(5),
    bias uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)] (0 when the weight is empty)."""
    from .. import init
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(bias, -bound, bound)


def check_device(device: Any) -> None:
    if device is not None and str(device).split(":")[0] != "cpu":
        raise RuntimeError(f"gradlog runs on the CPU only; cannot create a layer on '{device}'")
