"""Hooks a plugin registers on the model directly, not through its registrar (``run.hooks``):
found and removed when the run ends, with a warning naming the plugin.

A hook of the run (a plugin's registrar's, the adapter's root hook) is a ``RunHook``; any other
hook that appears on the model's modules, its parameters or the optimizer during a plugin's
``setup`` or one of its events other than the batch events was registered by that plugin. (The
batch events and the plugins' hooks, called at every step, are not watched: comparing the
registries costs a walk over the model.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import BATCH_EVENTS

__all__ = ["DirectHooks"]


class DirectHooks:
    """Which plugin registered which hook directly, and their removal at the end."""

    def __init__(self, engine: Any, model: Any, optimizer: Any) -> None:
        self._engine, self._model, self._optimizer = engine, model, optimizer
        self._found: dict[str, dict] = {}  # by plugin name

    def watched(self, slot: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (one of ``slot``'s plugin's methods), noting the hooks it registers."""
        def call(*args: Any, **kwargs: Any) -> Any:
            before = self._hooks()
            try:
                return fn(*args, **kwargs)
            finally:
                added = {k: v for k, v in self._hooks().items() if k not in before}
                if added:
                    self._found.setdefault(slot.name, {}).update(added)
        return call

    def watch_events(self, slot: Any) -> None:
        """Watch ``slot``'s event methods, the batch events excepted."""
        for event, (method, *how) in list(slot.methods.items()):
            if event not in BATCH_EVENTS:
                slot.methods[event] = (self.watched(slot, method), *how)

    def remove_left(self, slot: Any, report: Callable[[str], None]) -> None:
        """Remove the hooks ``slot``'s plugin registered directly that are still registered,
        and say so."""
        found = self._found.pop(slot.name, {})
        left = {k: v for k, v in self._hooks().items() if k in found}
        if not left:
            return
        self._engine.remove_hooks(left)
        names = ", ".join(f"{type(owner).__name__}.{attribute} "
                          f"{getattr(hook, '__name__', type(hook).__name__)}"
                          for (_, attribute, _), (owner, hook) in left.items())
        report(f"plugin '{slot.name}' registered {len(left)} hook(s) on the model or optimizer "
               f"directly, not through run.hooks ({names}): removed at the end of the run; "
               "register them with run.hooks.register_* to have them removed with the "
               "plugin's")

    def _hooks(self) -> dict:
        return self._engine.hooks_not_of_a_run(self._model, self._optimizer)
