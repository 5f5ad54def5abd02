"""Gradient clipping with PyTorch's numerics: the total norm is the norm of the per-parameter
norms, and gradients are scaled by ``min(1, max_norm / (total_norm + 1e-6))`` computed in the
gradients' dtype (so a float32 model is clipped exactly as PyTorch clips it)."""

from __future__ import annotations

import types
import warnings
from collections.abc import Iterable

import numpy as np

from ...autograd.creation import tensor
from ...autograd.grad_mode import no_grad
from ...autograd.ops.join import stack
from ...autograd.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_"]

_TensorOrTensors = Tensor | Iterable[Tensor]


def get_total_norm(tensors: _TensorOrTensors, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """The ``norm_type``-norm of the norms of ``tensors`` (as if they were one vector).

    Raises ``RuntimeError`` for a NaN or infinite norm when ``error_if_nonfinite``.
    """
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return tensor(0.0)
    with no_grad():
        norms = [t.norm(norm_type) for t in tensors]
        dtype = np.result_type(*(np.asarray(n).dtype for n in norms))
        total = stack([n.to(dtype) for n in norms]).norm(norm_type)
    if error_if_nonfinite and not np.isfinite(np.asarray(total)).all():
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters: _TensorOrTensors, max_norm: float, total_norm: Tensor,
                          foreach: bool | None = None) -> None:
    """Scale the gradients of ``parameters`` in place by ``min(1, max_norm / (total_norm +
    1e-6))``, given an already computed ``total_norm``."""
    params = [parameters] if isinstance(parameters, Tensor) else parameters
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    with no_grad():
        coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef)


def clip_grad_norm_(parameters: _TensorOrTensors, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Clip the gradients of ``parameters`` in place so their total norm is at most
    ``max_norm``; returns the total norm before clipping (a 0-d tensor).

    Args:
        parameters: a tensor or an iterable of tensors whose ``.grad`` is clipped (``None``
            gradients are ignored).
        max_norm: the largest total norm allowed.
        norm_type: the p of the p-norm; ``float("inf")`` for the largest absolute value.
        error_if_nonfinite: raise ``RuntimeError`` if the total norm is NaN or infinite
            (otherwise the gradients are scaled by the non-finite coefficient, as PyTorch does).
        foreach: accepted for compatibility; gradlog has a single implementation.
    """
    if isinstance(parameters, Tensor):
        params = [parameters]
    else:
        is_generator = isinstance(parameters, types.GeneratorType)
        params = list(parameters)
        if is_generator and not params:
            warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.",
                          stacklevel=2)
    grads = [p.grad for p in params if p.grad is not None]
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(params, max_norm, total, foreach)
    return total


def clip_grad_value_(parameters: _TensorOrTensors, clip_value: float,
                     foreach: bool | None = None) -> None:
    """Clamp every gradient element of ``parameters`` into ``[-clip_value, clip_value]``."""
    params = [parameters] if isinstance(parameters, Tensor) else parameters
    clip_value = float(clip_value)
    with no_grad():
        for p in params:
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
