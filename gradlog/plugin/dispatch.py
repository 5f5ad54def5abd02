"""Event dispatch: deterministic order, keyword subsets, and each call made through
``invoke`` under the run's failure policy (see ``policy.py``).

Order is ``(plugin.order, enabling index)``. Each plugin receives its own view of the run as
``run`` (``view.py``). A batch event reaches a plugin only on the steps its
``batch_events_every()`` asks for; the run says when the step moves on (``at_step``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .base import BATCH_EVENTS, EVENTS, event_kwargs, run_first
from .errors import PluginConfigError
from .policy import FailurePolicy, invoke

__all__ = ["Slot", "Dispatcher", "Replacements"]


class Slot:
    """The framework's record of one enabled plugin: its state in the run, its registrar,
    its generator and its view of the run."""

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
        self.queue_waits = 0    # waits for the writer's full queue since then
        self.registrar: Any = None
        self.generator: Any = None
        self.drawing: Any = None  # the generator object to draw from inside its internal pass
        self.view: Any = None
        self.every = plugin.batch_events_every()
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise PluginConfigError(f"plugin '{self.name}': batch_events_every() must return "
                                    f"an int >= 1, got {self.every!r}")
        # event: (method, the names it takes besides ``run`` or None for **kwargs, whether
        # it takes ``run``, whether ``run`` is all it takes, as its first positional
        # parameter), worked out once: an event is fired several times a step, and a
        # positional call is the cheapest one
        self.methods: dict[str, tuple[Any, tuple[str, ...] | None, bool, bool]] = {}
        for event in EVENTS:
            method = getattr(plugin, event, None)
            if method is not None:
                names = event_kwargs(method, event)
                others = None if names is None else tuple(n for n in names if n != "run")
                self.methods[event] = (method, others, names is None or "run" in names,
                                       others == () and run_first(method))

    @property
    def rng(self) -> Any:
        return self.drawing if self.drawing is not None else self.generator

    def disable(self, because: str) -> None:
        """Stop calling the plugin and remove its hooks; ``because`` says which failure."""
        self.enabled = False
        self.disabled_because = because
        if self.registrar is not None:
            self.registrar.remove_all()


class Replacements:
    """Which plugins replaced a value (a batch, a gradient, an activation) in the current
    batch: what to suspect when the step then fails outside any plugin."""

    def __init__(self) -> None:
        self._seen: dict[str, None] = {}

    def note(self, slot: Slot, where: str) -> None:
        self._seen[f"plugin '{slot.name}' ({where})"] = None

    def clear(self) -> None:
        self._seen = {}

    def __iter__(self) -> Any:
        return iter(list(self._seen))


def _unlike(value: Any, replacement: Any, is_tensor: Any) -> str | None:
    """Why ``replacement`` cannot stand in for the batch ``value`` (a batch of any structure: a
    tuple or list keeps its length, a mapping its keys, a dataclass its type, and their tensors
    stay tensors; sizes may change), or None."""
    def what(v: Any) -> str:
        if isinstance(v, (tuple, list)):
            return f"a {type(v).__name__} of {len(v)}"
        if isinstance(v, Mapping):
            return f"a {type(v).__name__} with keys {sorted(map(str, v))}"
        return "a tensor" if is_tensor(v) else f"a {type(v).__name__}"

    if isinstance(value, (tuple, list)):
        if not isinstance(replacement, (tuple, list)) or len(replacement) != len(value):
            return f"expected {what(value)}, got {what(replacement)}"
        pairs = [(f"element {i}", v, r) for i, (v, r) in enumerate(zip(value, replacement))]
    elif isinstance(value, Mapping):
        if not isinstance(replacement, Mapping) or set(replacement) != set(value):
            return f"expected {what(value)}, got {what(replacement)}"
        pairs = [(f"key {k!r}", v, replacement[k]) for k, v in value.items()]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(replacement) is not type(value):
            return f"expected a {type(value).__name__}, got {what(replacement)}"
        pairs = [(f"field {f.name!r}", getattr(value, f.name), getattr(replacement, f.name))
                 for f in dataclasses.fields(value)]
    else:
        pairs = [("", value, replacement)]
    for where, v, r in pairs:
        if is_tensor(v) and not is_tensor(r):
            return f"{where + ': ' if where else ''}expected a tensor, got {what(r)}"
    return None


class Dispatcher:
    """Fires events at the enabled plugins in order, each under ``policy``."""

    def __init__(self, slots: list[Slot], policy: FailurePolicy, replacements: Replacements,
                 is_tensor: Any) -> None:
        self.slots = sorted(slots, key=lambda s: (s.order, s.index))
        self.policy = policy
        self.replacements = replacements
        self.is_tensor = is_tensor
        self._listeners = {e: [s for s in self.slots if e in s.methods] for e in EVENTS}
        self._periodic = [s for s in self.slots if s.every > 1]
        self._due: tuple[bool, ...] | None = None  # which periodic slots are due now
        # steps [start, end) at which no periodic slot is due (the steps between two logging
        # steps): moving through them changes nothing, and costs one comparison
        self._quiet = range(0)
        self._now = dict(self._listeners)  # event -> the slots it reaches at this step
        self.at_step(0)

    def at_step(self, step: int) -> bool:
        """The run is at ``step`` now: a periodic plugin's batch events reach it only if
        ``step`` is a multiple of its ``every``. Returns whether that changed which plugins
        the batch events reach."""
        if step in self._quiet:  # (most steps)
            return False
        due = tuple(step % s.every == 0 for s in self._periodic)
        if any(due):
            self._quiet = range(0)
        else:  # until the next multiple of some plugin's every (no periodic plugin: forever)
            self._quiet = range(step, min(((step // s.every + 1) * s.every
                                           for s in self._periodic), default=step + 2 ** 62))
        if due == self._due:
            return False
        self._due = due
        skipped = {s for s, d in zip(self._periodic, due) if not d}
        for event in BATCH_EVENTS:
            self._now[event] = [s for s in self._listeners[event] if s not in skipped]
        return True

    def listens_now(self, event: str) -> bool:
        """Whether ``event`` reaches an enabled plugin at this step."""
        slots = self._now[event]
        return bool(slots) and any(s.enabled for s in slots)

    def call(self, slot: Slot, event: str, kwargs: dict, policy: FailurePolicy | None = None,
             *, disabled_too: bool = False) -> Any:
        """Call one plugin's event method, if it has one (and is enabled, unless
        ``disabled_too``), with its view of the run as ``run``."""
        entry = slot.methods.get(event)
        if entry is None or not (slot.enabled or disabled_too):
            return None
        method, others, takes_run, only_run = entry
        if only_run:  # (most events: the method takes the run and nothing else)
            return invoke(slot, event, method, (slot.view,), policy=policy or self.policy)
        if others is None:
            args = {**kwargs, "run": slot.view}
        else:
            args = {"run": slot.view} if takes_run else {}
            for name in others:
                args[name] = kwargs[name]
        return invoke(slot, event, method, kwargs=args, policy=policy or self.policy)

    def fire(self, event: str, **kwargs: Any) -> None:
        for slot in self._now[event]:
            if slot.enabled:
                self.call(slot, event, kwargs)

    def fire_chain(self, event: str, key: str, value: Any, **kwargs: Any) -> Any:
        """Fire ``event``; a mutator may return a replacement for ``kwargs[key]``."""
        for slot in self._now[event]:
            if not slot.enabled:
                continue
            kwargs[key] = value
            result = self.call(slot, event, kwargs)
            if result is None:
                continue
            problem = _unlike(value, result, self.is_tensor)
            if problem:
                self.policy.failed(slot, event, TypeError(
                    f"{event} must return None or a replacement shaped like its {key}: "
                    f"{problem}"))
                continue
            self.replacements.note(slot, event)
            value = result
        return value

    def fire_exception(self, error: BaseException, slots: list[Slot] | None = None) -> None:
        """``on_exception`` for every plugin (or those of ``slots``), disabled ones too; their
        own errors are reported, never raised."""
        quiet = dataclasses.replace(self.policy, warn_only=True)
        for slot in self.slots if slots is None else slots:
            self.call(slot, "on_exception", {"error": error}, quiet, disabled_too=True)
