"""The one way a plugin's code is called -- events, hooks, setup and teardown alike -- and the
failure policy it is called under.

``invoke(slot, where, fn, args, kwargs, policy=...)`` times the call into the plugin's
``ms_per_step``, lets control flow through, hands an exception (or an observer's returned
value) to the policy and resets the count of consecutive failures after a success. A policy
is a value: the run builds the ones it needs (events and hooks; setup, where one failure
disables; teardown and ``on_exception``, which only report) and passes them in.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

from .errors import NOT_A_PLUGIN_FAILURE, PluginError

__all__ = ["FailurePolicy", "invoke", "warn"]


def warn(message: str) -> None:
    """The default way a failure is said: a ``RuntimeWarning``."""
    warnings.warn(message, RuntimeWarning, stacklevel=4)


@dataclasses.dataclass(frozen=True)
class FailurePolicy:
    """What happens when a plugin fails.

    An observer's failure is said at once (``report(message)``, a warning by default), recorded
    (``record(slot, where, message, tb)``) and the observer is disabled, its hooks removed,
    after ``max_failures`` consecutive failures of the same event or hook kind. A mutator's
    failure, or any failure when ``strict``, stops the run with a ``PluginError``. A write
    error (``OSError``) is not a plugin's failure: it is raised unchanged, as are
    ``passes_through`` (e.g. a configuration error found in ``setup``); with ``warn_only`` a
    failure is only reported (teardown, ``on_exception``).
    """

    strict: bool = False
    max_failures: int = 3
    record: Callable[..., None] | None = None
    report: Callable[[str], None] = warn
    step: Callable[[], int] = lambda: 0
    passes_through: tuple = ()
    warn_only: bool = False

    def failed(self, slot: Any, where: str, exc: BaseException) -> None:
        """Apply the policy to ``exc``, raised by ``slot``'s plugin in ``where``."""
        if self.warn_only:
            self.report(f"plugin '{slot.name}' failed in {where}: {type(exc).__name__}: {exc}")
            return
        if isinstance(exc, (*NOT_A_PLUGIN_FAILURE, *self.passes_through)):
            raise exc
        step = self.step()
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
        self.report(message)
        if self.record is not None:
            self.record(slot, where, message, tb)
        if disable:
            times = "1 failure" if failures == 1 else f"{failures} failures in a row"
            slot.disable(f"{times} in {where}, the last at step {step}: "
                         f"{type(exc).__name__}: {exc}")


def invoke(slot: Any, where: str, fn: Callable[..., Any], args: tuple = (),
           kwargs: dict | None = None, *, policy: FailurePolicy, returns: bool = False) -> Any:
    """Call ``fn(*args, **kwargs)``, one of ``slot``'s plugin's methods or hooks, under
    ``policy``; returns its result, or None when it failed. Control flow (``SkipStep``,
    ``StopTraining``, ``PluginAbort``) propagates, except under a warn-only policy. An
    observer's result is a failure unless ``returns`` (its ``state_dict``)."""
    start = time.perf_counter()
    try:
        result = fn(*args, **kwargs) if kwargs else fn(*args)
    except Exception as exc:  # noqa: BLE001  (the policy decides; control flow goes through)
        policy.failed(slot, where, exc)
        return None
    finally:
        slot.seconds += time.perf_counter() - start
    if result is not None and slot.kind == "observer" and not returns:
        policy.failed(slot, where, TypeError(
            f"an observer's {where} must return None, got {type(result).__name__}"))
        return None
    if slot.failures:
        slot.failures.pop(where, None)  # a success ends the run of consecutive failures
    return result
