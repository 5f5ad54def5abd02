"""Values and tags in: the two conversions every ``add_*`` method shares.

Values may be gradlog tensors, PyTorch tensors, numpy arrays or Python numbers. Tensors are
recognized by duck typing (``detach()`` and ``numpy()``) so this package imports neither the
autograd engine nor torch; anything else goes through ``np.asarray`` (gradlog tensors also
implement ``__array__``). A PyTorch tensor may be on any device, require grad, and have any
dtype: those numpy lacks (bfloat16, the float8 types, complex32) are converted exactly to
float32 (complex64), where PyTorch goes through float16, which overflows bfloat16's range.

Tags are restricted to ``[A-Za-z0-9_./-]``: other characters are replaced by ``_`` and a warning
naming the tag is issued once per tag. The result is cached, so a tag costs one dict lookup.
"""

from __future__ import annotations

import re
import warnings

import numpy as np

__all__ = ["to_numpy", "to_float", "clean_tag"]

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_./-]")
_clean: dict[str, str] = {}
_CACHE_LIMIT = 100_000  # a program inventing a tag per step must not grow this forever


def to_numpy(value) -> np.ndarray:
    """``value`` as a numpy array, without a copy when it already is one."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        value = value.detach()
        if hasattr(value, "cpu"):  # a PyTorch tensor
            return _torch_to_numpy(value.cpu())
        return np.asarray(value.numpy())
    return np.asarray(value)


def _torch_to_numpy(tensor) -> np.ndarray:
    try:
        return tensor.numpy(force=True)  # also resolves the conjugate and negative bits
    except TypeError:  # "Got unsupported ScalarType BFloat16": a dtype numpy does not have
        return (tensor.cfloat() if tensor.is_complex() else tensor.float()).numpy(force=True)


def to_float(value) -> float:
    """A scalar value (number, 0-d or one-element tensor/array) as a Python float."""
    kind = type(value)
    if kind is float:
        return value
    if kind is int or kind is bool:
        return float(value)
    numel = getattr(value, "numel", None)
    if numel is not None and numel() == 1 and hasattr(value, "item"):
        return float(value.item())  # a one-element tensor (a loss): one call, no numpy view
    array = to_numpy(value)
    if array.size != 1:
        raise ValueError(f"expected a single value, got an array of shape {tuple(array.shape)}")
    return float(array.reshape(()))


def clean_tag(tag: str) -> str:
    """``tag`` with characters outside ``[A-Za-z0-9_./-]`` replaced by ``_`` (warns once)."""
    try:
        return _clean[tag]
    except KeyError:
        pass
    except TypeError:  # unhashable
        raise TypeError(f"a tag must be a str, got {type(tag).__name__}") from None
    if not isinstance(tag, str):
        raise TypeError(f"a tag must be a str, got {type(tag).__name__}")
    cleaned = _NOT_ALLOWED.sub("_", tag)
    if cleaned != tag:
        warnings.warn(f"tag {tag!r} has characters outside [A-Za-z0-9_./-]; "
                      f"it is written as {cleaned!r}", UserWarning, stacklevel=3)
    if len(_clean) < _CACHE_LIMIT:
        _clean[tag] = cleaned
    return cleaned
