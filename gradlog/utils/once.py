"""A result computed once, by whichever thread asks first."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["computed_once"]


class _Once:
    __slots__ = ("_lock", "_compute", "_result")

    def __init__(self, compute: Callable[[], Any]) -> None:
        self._lock = threading.Lock()
        self._compute: Callable[[], Any] | None = compute
        self._result: Any = None

    def __call__(self) -> Any:
        with self._lock:
            if self._compute is not None:
                self._result = self._compute()
                self._compute = None  # (and what it holds: snapshots, copies)
            return self._result


def computed_once(compute: Callable[[], Any]) -> Callable[[], Any]:
    """``compute``'s result, computed by the first call and returned by every call. Statistics
    are asked for by the writer's thread and sometimes by another (a rank's own sub-run, the
    doctor's rules); the counting reorders its own copies, which two callers must not do
    together. ``compute`` is dropped once it has run, so the snapshots it holds are freed when
    the numbers exist, however long the result is kept; if it raises, the next call tries
    again."""
    return _Once(compute)
