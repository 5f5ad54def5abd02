"""Event dispatch: deterministic order, keyword subsets, timing, and the failure policy.

Order is ``(plugin.order, enabling index)``. An observer's exception is reported (through the
run's ``report``, a warning by default, and a ``plugins/errors`` text summary naming plugin,
event and step) and the observer is disabled, its hooks removed, after ``max_failures``
consecutive failures; training goes on. A mutator's exception (or any plugin's, when strict)
stops the run with a ``PluginError``. A write error (``OSError``) is not a plugin's failure: it
stops the run as it is.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from . import adapter
from .base import EVENTS, event_kwargs
from .errors import CONTROL_FLOW, PluginError

__all__ = ["Slot", "Dispatcher"]


class Slot:
    """The framework's record of one enabled plugin."""

    def __init__(self, plugin: Any, index: int) -> None:
        self.plugin = plugin
        self.name = plugin.name
        self.kind = plugin.kind
        self.order = plugin.order
        self.index = index
        self.enabled = True
        self.disabled_because: str | None = None  # the failure that disabled it
        self.failures: dict[str, int] = {}  # consecutive failures, per event or hook kind
        self.total_failures = 0
        self.seconds = 0.0      # time spent since the last telemetry point
        self.registrar: Any = None
        self.generator: Any = None
        self.methods: dict[str, Any] = {}
        for event in EVENTS:
            method = getattr(plugin, event, None)
            if method is not None:
                self.methods[event] = (method, event_kwargs(method, event))


def _unlike(value: Any, replacement: Any) -> str | None:
    """Why ``replacement`` cannot stand in for ``value`` (a tuple or list keeps its length and
    its tensors stay tensors; sizes may change), or None."""
    def what(v: Any) -> str:
        if isinstance(v, (tuple, list)):
            return f"a {type(v).__name__} of {len(v)}"
        return "a tensor" if adapter.is_tensor(v) else f"a {type(v).__name__}"

    if isinstance(value, (tuple, list)):
        if not isinstance(replacement, (tuple, list)) or len(replacement) != len(value):
            return f"expected {what(value)}, got {what(replacement)}"
        for i, (v, r) in enumerate(zip(value, replacement)):
            if adapter.is_tensor(v) and not adapter.is_tensor(r):
                return f"element {i}: expected a tensor, got {what(r)}"
        return None
    if adapter.is_tensor(value) and not adapter.is_tensor(replacement):
        return f"expected a tensor, got {what(replacement)}"
    return None


class Dispatcher:
    def __init__(self, run: Any, slots: list[Slot], *, strict: bool, max_failures: int) -> None:
        self.run = run
        self.slots = sorted(slots, key=lambda s: (s.order, s.index))
        self.strict = strict
        self.max_failures = max_failures

    def active(self) -> list[Slot]:
        return [s for s in self.slots if s.enabled]

    def call(self, slot: Slot, event: str, kwargs: dict) -> Any:
        """Call one plugin's event method (if it has one) under the failure policy."""
        entry = slot.methods.get(event)
        if entry is None or not slot.enabled:
            return None
        method, names = entry
        args = kwargs if names is None else {n: kwargs[n] for n in names}
        run = self.run
        prev = run._active
        run._active = slot
        start = time.perf_counter()
        try:
            result = method(**args)
            if slot.failures and (result is None or slot.kind == "mutator"):
                slot.failures.pop(event, None)  # (an observer's return value is a failure)
            return result
        except CONTROL_FLOW:
            raise
        except Exception as exc:  # noqa: BLE001  (the failure policy decides)
            self.failed(slot, event, exc)
            return None
        finally:
            slot.seconds += time.perf_counter() - start
            run._active = prev

    def fire(self, event: str, **kwargs: Any) -> None:
        kwargs["run"] = self.run
        for slot in self.slots:
            if slot.enabled and event in slot.methods:
                self.call(slot, event, kwargs)

    def fire_chain(self, event: str, key: str, value: Any, **kwargs: Any) -> Any:
        """Fire ``event``; a mutator may return a replacement for ``kwargs[key]``."""
        kwargs["run"] = self.run
        for slot in self.slots:
            if not (slot.enabled and event in slot.methods):
                continue
            kwargs[key] = value
            result = self.call(slot, event, kwargs)
            if result is None:
                continue
            if slot.kind != "mutator":
                self.failed(slot, event, TypeError(
                    f"an observer's {event} must return None, got {type(result).__name__}"))
                continue
            problem = _unlike(value, result)
            if problem:
                self.failed(slot, event, TypeError(
                    f"{event} must return None or a replacement shaped like its {key}: "
                    f"{problem}"))
                continue
            self.run._note_replacement(slot, event)
            value = result
        return value

    def fire_exception(self, error: BaseException, slots: list[Slot] | None = None) -> None:
        """``on_exception`` for every plugin (or those of ``slots``); their own errors are
        reported, not raised."""
        run = self.run
        for slot in self.slots if slots is None else slots:
            entry = slot.methods.get("on_exception")
            if entry is None:
                continue
            method, names = entry
            kwargs = {"run": run, "error": error}
            try:
                method(**(kwargs if names is None else {n: kwargs[n] for n in names}))
            except Exception as exc:  # noqa: BLE001
                run.report(f"plugin '{slot.name}' failed in on_exception: "
                           f"{type(exc).__name__}: {exc}")

    def failed(self, slot: Slot, where: str, exc: BaseException) -> None:
        """Apply the failure policy to ``slot``'s exception raised in ``where``."""
        if isinstance(exc, (*CONTROL_FLOW, OSError)):
            raise exc
        step = self.run.step
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if self.strict or slot.kind == "mutator":
            raise PluginError(slot.name, where, step, exc, tb) from exc
        # NOTE: "in a row" counts the calls of one event or hook kind: a hook that fails at
        # every step is disabled even if the plugin's other events succeed in between.
        failures = slot.failures[where] = slot.failures.get(where, 0) + 1
        slot.total_failures += 1
        disable = failures >= self.max_failures
        note = (f" (failure {failures} in a row; disabled after {self.max_failures}, its "
                "hooks removed)" if disable else
                f" (failure {failures} in a row of {self.max_failures} allowed)")
        message = (f"plugin '{slot.name}' (observer) failed in {where} at step {step}: "
                   f"{type(exc).__name__}: {exc}{note}")
        self.run.report(message)
        self.run._record_error(slot, where, message, tb)
        if disable:
            times = "1 failure" if failures == 1 else f"{failures} failures in a row"
            self.disable(slot, f"{times} in {where}, the last at step {step}: "
                               f"{type(exc).__name__}: {exc}")

    def disable(self, slot: Slot, because: str) -> None:
        slot.enabled = False
        slot.disabled_because = because
        if slot.registrar is not None:
            slot.registrar.remove_all()
