"""The ``Plugin`` base class: what a plugin declares and which events it may implement."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, ClassVar

from .errors import PluginConfigError
from .options import validate_options

__all__ = ["Plugin", "EVENTS", "BATCH_EVENTS", "API_VERSION"]

API_VERSION = 1

# event name -> the keyword arguments it is called with (``run`` always among them)
EVENTS: dict[str, tuple[str, ...]] = {
    "on_train_start": ("run",),
    "on_epoch_start": ("run",),
    "on_batch_start": ("run", "batch"),
    "on_after_backward": ("run",),
    "on_before_optimizer_step": ("run",),
    "on_after_optimizer_step": ("run",),
    "on_batch_end": ("run", "metrics"),
    "on_validation_end": ("run", "metrics"),
    "on_epoch_end": ("run",),
    "on_train_end": ("run",),
    "on_exception": ("run", "error"),
}
LIFECYCLE = ("setup", "teardown")
# the events of one batch, all fired at the same ``run.step``: what ``batch_events_every``
# thins out
BATCH_EVENTS = ("on_batch_start", "on_after_backward", "on_before_optimizer_step",
                "on_after_optimizer_step", "on_batch_end")


class Plugin:
    """Base class of gradlog plugins; subclass it and register it as an entry point in the
    group ``gradlog.plugins``.

    Class attributes: ``name`` (the entry-point name), ``kind`` (``"observer"`` only reads;
    ``"mutator"`` changes training), ``order`` (ascending; ties keep enabling order),
    ``api_version``, and ``Options`` (a dataclass of typed options with defaults and help).
    ``Plugin(**options)`` validates the options into ``self.options``.

    Every event method is optional and called with keyword arguments (``run`` plus the
    event's own, e.g. ``metrics``); a method receives only the arguments it declares.
    A plugin that only works every N steps says so with ``batch_events_every``.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "observer"
    order: ClassVar[int] = 100
    api_version: ClassVar[int] = API_VERSION
    Options: ClassVar[Any] = None
    touches: ClassVar[tuple] = ()  # what it hooks into, shown by `gradlog plugins show`

    def __init__(self, **options: Any) -> None:
        check_plugin_class(type(self))
        self.options = validate_options(self.name, self.Options, options)

    def setup(self, run: Any) -> None:
        """Register hooks through ``run.hooks``; the framework tracks and removes them."""

    def teardown(self, run: Any) -> None:
        """Release resources; the framework has already removed this plugin's hooks."""

    def batch_events_every(self) -> int:
        """N: the batch events (``on_batch_start`` to ``on_batch_end``) reach this plugin on
        steps 0, N, 2N, ... only. Asked once, when the run is made. Default 1, every step. A
        plugin that logs every N steps and keeps no per-step state returns N: it then costs
        nothing on the other steps. Its own hooks still fire."""
        return 1

    def state_dict(self) -> dict:
        """State to keep in checkpoints (counters, windows); restored on ``--resume``."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` returned."""

    def __repr__(self) -> str:
        return f"<plugin {self.name} ({self.kind}, order {self.order})>"


def check_plugin_class(cls: type) -> None:
    """Validate a plugin class when it is enabled, not when it first fails."""
    name = getattr(cls, "name", "")
    where = f"plugin class {cls.__module__}.{cls.__qualname__}"
    if not isinstance(name, str) or not name:
        raise PluginConfigError(f"{where} has no 'name'")
    if cls.kind not in ("observer", "mutator"):
        raise PluginConfigError(f"plugin '{name}': kind must be 'observer' or 'mutator', got "
                                f"{cls.kind!r}")
    if cls.api_version != API_VERSION:
        raise PluginConfigError(f"plugin '{name}' targets plugin API version "
                                f"{cls.api_version}; this gradlog supports {API_VERSION}")
    if not isinstance(cls.order, int):
        raise PluginConfigError(f"plugin '{name}': order must be an int, got {cls.order!r}")
    if cls.Options is not None and not dataclasses.is_dataclass(cls.Options):
        raise PluginConfigError(f"plugin '{name}': Options must be a dataclass")
    for event, accepted in EVENTS.items():
        method = getattr(cls, event, None)
        if method is None:
            continue
        params = inspect.signature(method).parameters
        for pname, p in list(params.items())[1:]:
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            if pname not in accepted and p.default is p.empty:
                raise PluginConfigError(
                    f"plugin '{name}': {event} takes an argument '{pname}' that the event does "
                    f"not provide (it provides: {', '.join(accepted)})")


def run_first(method: Any) -> bool:
    """Whether ``method``'s first parameter is ``run`` and may be passed by position."""
    first = next(iter(inspect.signature(method).parameters.values()), None)
    return first is not None and first.name == "run" and first.kind in (
        first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD)


def event_kwargs(method: Any, event: str) -> tuple[str, ...] | None:
    """The argument names ``method`` accepts for ``event`` (None: it takes ``**kwargs``)."""
    params = inspect.signature(method).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return None
    return tuple(n for n in EVENTS.get(event, ("run",)) if n in params)
