"""What the training loop asks of the engine, in one place: values as numpy, ``no_grad``, the
global random state and its seed. Today these are the plugin adapter's functions; when a run
gets its engine object (``run.engine``), this module is the one that changes."""

from __future__ import annotations

from ..autograd.random import manual_seed
from ..plugin import adapter

__all__ = ["to_numpy", "no_grad", "random_state", "set_random_state", "manual_seed"]

to_numpy = adapter.to_numpy
no_grad = adapter.no_grad
random_state = adapter.random_state
set_random_state = adapter.set_random_state
