"""Factory functions: ``gl.tensor``, ``gl.zeros``, ``gl.randn``, ... with PyTorch's dtype rules.

Python floats become the default dtype (float32), Python ints int64, bools bool; numpy arrays
keep their dtype. Random functions draw from ``generator`` or the default generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import dtypes
from .random import Generator, rng
from .tensor import Tensor, wrap

__all__ = [
    "tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "empty", "arange", "linspace",
    "eye", "zeros_like", "ones_like", "full_like", "empty_like", "rand", "randn", "randint",
    "rand_like", "randn_like", "randint_like", "randperm", "normal",
]


def _np_dtype(dtype: Any) -> np.dtype | None:
    return None if dtype is None else dtypes.to_numpy_dtype(dtype)


def _infer(data: Any) -> np.ndarray:
    """Convert Python data with PyTorch's rules (floats -> default dtype, ints -> int64)."""
    if isinstance(data, Tensor):
        return data._data.copy()
    if isinstance(data, np.ndarray):
        arr = data.copy()
    elif isinstance(data, np.generic):
        arr = np.array(data)
    else:
        arr = np.array(_unwrap_nested(data))
        if arr.dtype.kind == "f":
            arr = arr.astype(dtypes.get_default_dtype().np)
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
        elif arr.dtype.kind == "O":
            raise TypeError(f"could not convert {type(data).__name__} to a tensor: nested "
                            "sequences must be rectangular and hold numbers or tensors")
    if arr.dtype.kind in "US":
        raise TypeError(f"new(): invalid data type '{arr.dtype.kind == 'U' and 'str'}'")
    if arr.dtype not in dtypes._BY_NUMPY:
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float64)
        else:
            dtypes.as_dtype(arr.dtype)  # raises a TypeError naming the dtype
    return arr


def _unwrap_nested(data: Any) -> Any:
    if isinstance(data, Tensor):
        return data._data
    if isinstance(data, (list, tuple)):
        return [_unwrap_nested(d) for d in data]
    return data


def _finish(arr: np.ndarray, dtype: Any, requires_grad: bool) -> Tensor:
    if dtype is not None:
        arr = arr.astype(_np_dtype(dtype), copy=False)
    t = wrap(arr)
    if requires_grad:
        if arr.dtype.kind != "f":
            raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                               "gradients")
        t.requires_grad_(True)
    return t


def tensor(data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False,
           pin_memory: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, arrays or tensors)."""
    return _finish(_infer(data), dtype, requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Like ``tensor`` but shares memory with a numpy array or tensor when it can."""
    if isinstance(data, Tensor) and (dtype is None or data.dtype == dtype):
        return data
    if isinstance(data, np.ndarray) and data.dtype in dtypes._BY_NUMPY:
        return _finish(data, dtype, False)
    return tensor(data, dtype=dtype)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``array``."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    dtypes.as_dtype(array.dtype)
    return wrap(array)


def legacy_tensor_data(args: tuple) -> np.ndarray:
    """``gl.Tensor(...)``: sizes give an uninitialized (zero) float32 tensor, data a copy."""
    f32 = dtypes.float32.np
    if not args:
        return np.zeros((0,), f32)
    if all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args):
        return np.zeros(tuple(int(a) for a in args), f32)
    if len(args) == 1:
        data = args[0]
        if isinstance(data, (list, tuple)) and all(
                isinstance(a, (int, np.integer)) for a in data) and isinstance(data, tuple):
            return np.zeros(data, f32)
        return np.array(_unwrap_nested(data), dtype=f32)
    raise TypeError(f"Tensor(): invalid arguments {args!r}")


def _flat_size(size: tuple) -> tuple:
    if len(size) == 1 and isinstance(size[0], (Sequence, np.ndarray)):
        return tuple(size[0])
    return size


def _size(size: tuple) -> tuple:
    size = _flat_size(size)
    out = []
    for s in size:
        if isinstance(s, Tensor):
            s = s.item()
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise TypeError(f"size must be a tuple of ints, but got an element of type "
                            f"{type(s).__name__}")
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: "
                               f"{list(size)}")
        out.append(int(s))
    return tuple(out)


def _float_dtype(dtype: Any) -> np.dtype:
    return dtypes.get_default_dtype().np if dtype is None else _np_dtype(dtype)


def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
          out: Any = None) -> Tensor:
    if any(isinstance(s, (int, np.integer)) and s < 0 for s in _flat_size(size)):
        raise RuntimeError("zeros: Dimension size must be non-negative.")  # PyTorch's own text
    return _finish(np.zeros(_size(size), _float_dtype(dtype)), None, requires_grad)


def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(np.ones(_size(size), _float_dtype(dtype)), None, requires_grad)


def empty(*size: Any, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    # Zero-filled: an uninitialized buffer would make runs irreproducible for no gain here.
    return zeros(*size, dtype=dtype, requires_grad=requires_grad)


def _scalar_dtype(value: Any) -> np.dtype:
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(np.bool_)
    if isinstance(value, (int, np.integer)):
        return np.dtype(np.int64)
    return dtypes.get_default_dtype().np


def full(size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    np_dtype = _scalar_dtype(fill_value) if dtype is None else _np_dtype(dtype)
    return _finish(np.full(_size((size,)), fill_value, np_dtype), None, requires_grad)


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:
    if end is None:
        start, end = 0, start
    values = (start, end, step)
    if dtype is None:
        is_int = all(isinstance(v, (int, np.integer)) for v in values)
        np_dtype = np.dtype(np.int64) if is_int else dtypes.get_default_dtype().np
    else:
        np_dtype = _np_dtype(dtype)
    if step == 0:
        raise RuntimeError("step must be nonzero")
    return _finish(np.arange(start, end, step).astype(np_dtype), None, requires_grad)


def linspace(start: float, end: float, steps: int, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    return _finish(np.linspace(start, end, steps).astype(_float_dtype(dtype)), None,
                   requires_grad)


def eye(n: int, m: int | None = None, *, dtype: Any = None, device: Any = None,
        requires_grad: bool = False) -> Tensor:
    return _finish(np.eye(n, m, dtype=_float_dtype(dtype)), None, requires_grad)


def _like_dtype(t: Tensor, dtype: Any) -> np.dtype:
    return t._data.dtype if dtype is None else _np_dtype(dtype)


def zeros_like(input: Tensor, *, dtype: Any = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
    return _finish(np.zeros(input._data.shape, _like_dtype(input, dtype)), None, requires_grad)


def ones_like(input: Tensor, *, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    return _finish(np.ones(input._data.shape, _like_dtype(input, dtype)), None, requires_grad)


def empty_like(input: Tensor, *, dtype: Any = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
    return zeros_like(input, dtype=dtype, requires_grad=requires_grad)


def full_like(input: Tensor, fill_value: Any, *, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    return _finish(np.full(input._data.shape, fill_value, _like_dtype(input, dtype)), None,
                   requires_grad)


def rand(*size: Any, generator: Generator | None = None, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    """Uniform on [0, 1)."""
    np_dtype = _float_dtype(dtype)
    data = rng(generator).random(_size(size), dtype=np.float64).astype(np_dtype)
    return _finish(data, None, requires_grad)


def randn(*size: Any, generator: Generator | None = None, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal."""
    np_dtype = _float_dtype(dtype)
    data = rng(generator).standard_normal(_size(size), dtype=np.float64).astype(np_dtype)
    return _finish(data, None, requires_grad)


def randint(low: int, high: int | None = None, size: Any = None, *,
            generator: Generator | None = None, dtype: Any = None, device: Any = None,
            requires_grad: bool = False) -> Tensor:
    """Integers uniform on [low, high); ``randint(high, size)`` as in PyTorch."""
    if size is None:
        if high is None or not isinstance(high, (tuple, list)):
            raise TypeError("randint() missing required argument 'size'")
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    np_dtype = np.dtype(np.int64) if dtype is None else _np_dtype(dtype)
    data = rng(generator).integers(low, high, _size((size,))).astype(np_dtype)
    return _finish(data, None, requires_grad)


def rand_like(input: Tensor, *, generator: Generator | None = None, dtype: Any = None) -> Tensor:
    return rand(input.shape, generator=generator, dtype=dtype or input.dtype)


def randn_like(input: Tensor, *, generator: Generator | None = None, dtype: Any = None) -> Tensor:
    return randn(input.shape, generator=generator, dtype=dtype or input.dtype)


def randint_like(input: Tensor, low: int, high: int | None = None, *,
                 generator: Generator | None = None, dtype: Any = None) -> Tensor:
    return randint(low, high, input.shape, generator=generator, dtype=dtype or input.dtype)


def randperm(n: int, *, generator: Generator | None = None, dtype: Any = None,
             device: Any = None) -> Tensor:
    data = rng(generator).permutation(n).astype(np.int64 if dtype is None else _np_dtype(dtype))
    return wrap(data)


def normal(mean: float, std: float, size: Any, *, generator: Generator | None = None,
           dtype: Any = None) -> Tensor:
    data = rng(generator).normal(mean, std, _size((size,))).astype(_float_dtype(dtype))
    return wrap(data)
