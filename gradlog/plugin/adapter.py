"""The engine adapter: the only place where the plugin framework and the built-in plugins
touch what differs between engines (how a tensor becomes numpy, how the end of a backward
pass is signalled, the random state). Everything else uses the PyTorch-named public API that
gradlog mirrors. A PyTorch adapter provides the same functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import autograd
from ..autograd import random as _random
from ..autograd.creation import from_numpy as _from_numpy
from ..autograd.tensor import Tensor

ENGINE = "gradlog"

__all__ = ["ENGINE", "to_numpy", "from_numpy", "is_tensor", "on_backward_end", "no_grad",
           "enable_grad", "is_grad_enabled", "random_state", "set_random_state",
           "new_generator", "use_generator", "grad", "get_total_norm",
           "clip_grads_with_norm_"]


def to_numpy(value: Any) -> np.ndarray:
    """A read-only numpy view of a tensor's values (observers cannot change them by
    accident); numbers and arrays are converted too."""
    if isinstance(value, Tensor):
        arr = value.detach().numpy().view()
    else:
        arr = np.array(value)
    arr.flags.writeable = False
    return arr


def from_numpy(array: np.ndarray, like: Any = None) -> Tensor:
    """A tensor holding ``array`` (cast to ``like``'s dtype when given)."""
    if like is not None:
        array = np.asarray(array, dtype=like.detach().numpy().dtype)
    return _from_numpy(np.ascontiguousarray(array))


def is_tensor(value: Any) -> bool:
    return isinstance(value, Tensor)


def on_backward_end(hook: Any) -> Any:
    """Call ``hook()`` after every backward pass that accumulated into ``.grad``."""
    return autograd.register_backward_end_hook(hook)


no_grad = autograd.no_grad
enable_grad = autograd.enable_grad
is_grad_enabled = autograd.is_grad_enabled


def random_state() -> Any:
    """The global random state (restored after internal passes)."""
    return _random.get_rng_state()


def set_random_state(state: Any) -> None:
    _random.set_rng_state(state)


def new_generator(seed: int) -> Any:
    return _random.Generator().manual_seed(seed)


def use_generator(generator: Any) -> Any:
    """Make ``generator`` the source of the engine's global random functions (dropout, randn)
    for the block; the global stream is left exactly as it was, and draws made on
    ``generator`` directly inside the block advance the same stream."""
    return _random.default_generator_as(generator)


# Engine functions plugins call by their PyTorch names (torch.autograd.grad,
# torch.nn.utils.get_total_norm / clip_grads_with_norm_ in the PyTorch adapter).
grad = autograd.grad


def get_total_norm(tensors: Any, norm_type: float = 2.0, **kwargs: Any) -> Any:
    from ..nn.utils import get_total_norm as impl
    return impl(tensors, norm_type, **kwargs)


def clip_grads_with_norm_(parameters: Any, max_norm: float, total_norm: Any,
                          **kwargs: Any) -> Any:
    from ..nn.utils import clip_grads_with_norm_ as impl
    return impl(parameters, max_norm, total_norm, **kwargs)
