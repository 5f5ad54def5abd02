"""Discovering plugins (entry points in the group ``gradlog.plugins``) and enabling them.

Discovery never imports a plugin; a plugin is imported only when enabled (or when
``gradlog plugins list/show`` inspects it in isolation). A broken plugin that is not enabled
affects nothing; an enabled one that fails to import stops the run before training.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from .base import Plugin, check_plugin_class
from .errors import PluginConfigError, PluginLoadError
from .options import parse_spec

__all__ = ["GROUP", "PluginInfo", "discover", "load", "inspect_plugin", "resolve_plugins"]

GROUP = "gradlog.plugins"


@dataclass(frozen=True)
class PluginInfo:
    """An installed plugin as its entry point declares it (nothing imported)."""

    name: str
    value: str                 # "package.module:Class"
    distribution: str
    version: str
    entry_point: Any = field(repr=False, compare=False, default=None)


def discover() -> list[PluginInfo]:
    """Every plugin declared in the ``gradlog.plugins`` entry-point group, sorted by name."""
    import importlib.metadata as metadata  # here, not at import time: `import gradlog` stays fast
    found = []
    for ep in metadata.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        found.append(PluginInfo(ep.name, ep.value, dist.name if dist else "?",
                                dist.version if dist else "?", ep))
    return sorted(found, key=lambda i: i.name)


def _info(name: str, available: list[PluginInfo]) -> PluginInfo:
    matches = [i for i in available if i.name == name]
    if not matches:
        names = ", ".join(i.name for i in available) or "(none installed)"
        raise PluginConfigError(f"unknown plugin '{name}'; installed plugins: {names}")
    if len({(m.value, m.distribution) for m in matches}) > 1:
        dists = ", ".join(f"{m.distribution} ({m.value})" for m in matches)
        raise PluginConfigError(f"plugin name '{name}' is declared by more than one "
                                f"distribution: {dists}")
    return matches[0]


def load(name: str, available: list[PluginInfo] | None = None) -> type:
    """Import the plugin class registered as ``name``."""
    info = _info(name, discover() if available is None else available)
    try:
        cls = info.entry_point.load()
    except Exception as exc:  # noqa: BLE001  (any import-time error makes the plugin broken)
        raise PluginLoadError(
            f"plugin '{name}' from {info.distribution} {info.version} ({info.value}) failed to "
            f"import: {type(exc).__name__}: {exc}\n{traceback.format_exc()}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Plugin)):
        raise PluginLoadError(f"plugin '{name}' from {info.distribution} ({info.value}) is not a "
                              "gradlog.plugin.Plugin subclass")
    try:
        check_plugin_class(cls)
    except PluginConfigError as exc:
        raise PluginLoadError(str(exc)) from None
    if cls.name != name:
        raise PluginLoadError(f"plugin '{name}' ({info.value}) declares name '{cls.name}'; the "
                              "entry-point name and the class's name must match")
    return cls


def inspect_plugin(info: PluginInfo) -> dict:
    """Import one plugin in isolation for ``gradlog plugins list/show``: its class or error."""
    try:
        return {"cls": load(info.name, [info]), "error": None}
    except (PluginLoadError, PluginConfigError) as exc:
        return {"cls": None, "error": str(exc).splitlines()[0]}


def resolve_plugins(specs: Any = (), *, defaults: Any = (), config: dict | None = None,
                    available: list[PluginInfo] | None = None) -> list[Plugin]:
    """Instantiate the enabled plugins, in enabling order: ``defaults``, then the
    ``[plugins.NAME]`` tables of ``config``, then ``specs`` (``-p`` strings, plugin classes or
    instances). Options merge per key (later wins); naming a plugin twice in ``specs`` is an
    error. Every option is validated before anything runs."""
    order: list[str] = []
    options: dict[str, dict] = {}
    classes: dict[str, type] = {}
    instances: dict[str, Plugin] = {}

    def enable(name: str, opts: dict) -> None:
        if name not in options:
            order.append(name)
            options[name] = {}
        options[name].update(opts)

    for name in defaults:
        enable(name, {})
    tables = (config or {}).get("plugins", {})
    if not isinstance(tables, dict):
        raise PluginConfigError("the config's 'plugins' entry must be a table of tables")
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise PluginConfigError(f"[plugins.{name}] must be a table of options")
        enable(name, table)
    seen_specs: set = set()
    for spec in specs:
        if isinstance(spec, Plugin):
            name = spec.name
            instances[name] = spec
        elif isinstance(spec, type) and issubclass(spec, Plugin):
            check_plugin_class(spec)
            name = spec.name
            classes[name] = spec
        else:
            name, opts = parse_spec(spec)
            enable(name, opts)
        if name in seen_specs:
            raise PluginConfigError(f"plugin '{name}' is enabled twice")
        seen_specs.add(name)
        if name not in options:
            order.append(name)
            options[name] = {}
    needs_discovery = [n for n in order if n not in classes and n not in instances]
    found = (discover() if available is None else available) if needs_discovery else []
    plugins = []
    for name in order:
        if name in instances:
            if options[name]:
                raise PluginConfigError(f"plugin '{name}' was given as an instance; options "
                                        "cannot be added to it")
            plugins.append(instances[name])
            continue
        cls = classes.get(name) or load(name, found)
        plugins.append(cls(**options[name]))
    return plugins
