"""Anomaly detection: name the forward operation whose backward produced NaN (or Inf).

gradlog flags Inf as well as NaN (a documented difference from PyTorch, whose ``check_nan``
ignores Inf): a gradient that overflowed is as useless for training as one that is NaN.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "is_anomaly_check_nan_enabled"]


class _State:  # process-wide, as PyTorch's anomaly mode (and read on every operation)
    def __init__(self) -> None:
        self.enabled = False  # instance attributes: the interpreter reads these fastest
        self.check_nan = True


state = _State()

_ENABLED_WARNING = ("Anomaly Detection has been enabled. This mode will increase the runtime "
                    "and should only be enabled for debugging.")


def is_anomaly_enabled() -> bool:
    return state.enabled


def is_anomaly_check_nan_enabled() -> bool:
    return state.check_nan


class detect_anomaly:
    """Context manager (and decorator) that turns anomaly detection on for its block.

    While on, every recorded operation keeps the stack of the code that created it, and a
    backward function that returns NaN or Inf raises ``RuntimeError`` naming that operation.
    """

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = check_nan

    def __enter__(self) -> None:
        warnings.warn(_ENABLED_WARNING, stacklevel=2)
        self._prev = (state.enabled, state.check_nan)
        state.enabled, state.check_nan = True, self.check_nan

    def __exit__(self, *exc_info: object) -> None:
        state.enabled, state.check_nan = self._prev

    def __call__(self, func: Any) -> Any:
        import functools

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with detect_anomaly(self.check_nan):
                return func(*args, **kwargs)

        return wrapper


class set_detect_anomaly:
    """Turn anomaly detection on or off now; as a context manager, only for the block."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self._prev = (state.enabled, state.check_nan)
        state.enabled, state.check_nan = bool(mode), check_nan

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc_info: object) -> None:
        state.enabled, state.check_nan = self._prev
