"""Creating parameters with a layer's ``dtype`` argument (float32 unless given)."""

from __future__ import annotations

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


def check_device(device: Any) -> None:
    if device is not None and str(device).split(":")[0] != "cpu":
        raise RuntimeError(f"gradlog runs on the CPU only; cannot create a layer on '{device}'")
