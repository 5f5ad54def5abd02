"""Hooks that belong to one run, not to the objects they are registered on.

A run's hooks live in the registries of the user's model and its parameters, so whatever
copies the model copies them too: ``copy.deepcopy(model)``, an EMA wrapper
(``torch.optim.swa_utils.AveragedModel``), ``torch.save(model)``. A copy must not be watched
(its forward would log into the run) and must not carry the run (its writer, threads and
locks cannot be pickled). Wrapped in ``RunHook``, a hook copies (deep copy, pickle) as an
``InertHook``: it does nothing, returns nothing and refers to nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["RunHook", "InertHook"]


class InertHook:
    """What a run's hook becomes in a copy of the model: called, it does nothing (it returns
    None, so no hook kind reads it as a replacement value)."""

    __slots__ = ()
    __name__ = "inert_hook"

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __repr__(self) -> str:
        return "<inert hook of a copied model>"


class RunHook:
    """``fn`` as a hook of a run: called, it calls ``fn``; copied or pickled, it is an
    ``InertHook``."""

    __slots__ = ("fn", "__name__")

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.__name__ = name or getattr(fn, "__name__", "hook")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __deepcopy__(self, memo: dict) -> InertHook:
        return InertHook()

    def __reduce__(self) -> tuple:
        return (InertHook, ())

    def __repr__(self) -> str:
        return f"<hook {self.__name__} of a gradlog run>"
