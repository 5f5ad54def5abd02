"""Discovering plugins (entry points in the group ``gradlog.plugins``) and enabling them.

Discovery never imports a plugin; a plugin is imported only when enabled (or when
``gradlog plugins list/show`` inspects it in isolation). A broken plugin that is not enabled
affects nothing; an enabled one that fails to import stops the run before training. A name
declared by two distributions is a conflict: listed once, naming both, and an error only when
the plugin is enabled.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from .base import Plugin, check_plugin_class
from .errors import PluginConfigError, PluginLoadError
from .options import did_you_mean, parse_spec

__all__ = ["GROUP", "PluginInfo", "discover", "by_name", "conflict_message", "load",
           "inspect_plugin", "merge_plugins", "instantiate", "resolve_plugins"]

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
    found: dict[tuple, PluginInfo] = {}
    for ep in metadata.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        info = PluginInfo(ep.name, ep.value, dist.name if dist else "?",
                          dist.version if dist else "?", ep)
        # a distribution found twice on sys.path declares its plugins once
        found.setdefault((info.name, info.value, info.distribution), info)
    return sorted(found.values(), key=lambda i: (i.name, i.distribution))


def by_name(available: list[PluginInfo]) -> dict[str, list[PluginInfo]]:
    """The declarations of each plugin name, in name order: more than one is a conflict."""
    out: dict[str, list[PluginInfo]] = {}
    for info in available:
        out.setdefault(info.name, []).append(info)
    return out


def conflict_message(name: str, declarations: list[PluginInfo]) -> str:
    dists = " and ".join(f"{m.distribution} ({m.value})" for m in declarations)
    return f"plugin name '{name}' is declared by more than one distribution: {dists}"


def _info(name: str, available: list[PluginInfo]) -> PluginInfo:
    declared = by_name(available)
    if name not in declared:
        names = ", ".join(declared) or "(none installed)"
        raise PluginConfigError(f"unknown plugin '{name}';{did_you_mean(name, declared)} "
                                f"installed plugins: {names}")
    if len(declared[name]) > 1:
        raise PluginConfigError(conflict_message(name, declared[name]))
    return declared[name][0]


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


def merge_plugins(specs: Any = (), *, defaults: Any = (), config: dict | None = None
                  ) -> list[tuple[str, dict, Any]]:
    """The enabled plugins as ``(name, options, given)``, in enabling order: ``defaults``, then
    the ``[plugins.NAME]`` tables of ``config``, then ``specs`` (``-p`` strings, plugin classes
    or instances; ``given`` is the class or instance, else None). Options merge per key (later
    wins); naming a plugin twice in ``specs`` is an error. Nothing is imported."""
    order: list[str] = []
    options: dict[str, dict] = {}
    given: dict[str, Any] = {}

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
            given[name] = spec
        elif isinstance(spec, type) and issubclass(spec, Plugin):
            check_plugin_class(spec)
            name = spec.name
            given[name] = spec
        else:
            name, opts = parse_spec(spec)
            enable(name, opts)
        if name in seen_specs:
            raise PluginConfigError(f"plugin '{name}' is enabled twice")
        seen_specs.add(name)
        enable(name, {})
    return [(name, options[name], given.get(name)) for name in order]


def instantiate(enabled: list[tuple[str, dict, Any]],
                available: list[PluginInfo] | None = None) -> list[Plugin]:
    """The plugins of :func:`merge_plugins`' list, each validating its options; the ones not
    given as a class or instance are imported (only they)."""
    needs_discovery = any(given is None for _, _, given in enabled)
    found = (discover() if available is None else available) if needs_discovery else []
    plugins = []
    for name, options, given in enabled:
        if isinstance(given, Plugin):
            if options:
                raise PluginConfigError(f"plugin '{name}' was given as an instance; options "
                                        "cannot be added to it")
            plugins.append(given)
            continue
        cls = given or load(name, found)
        plugins.append(cls(**options))
    return plugins


def resolve_plugins(specs: Any = (), *, defaults: Any = (), config: dict | None = None,
                    available: list[PluginInfo] | None = None) -> list[Plugin]:
    """Instantiate the enabled plugins (:func:`merge_plugins`, then :func:`instantiate`):
    every option is validated before anything runs."""
    return instantiate(merge_plugins(specs, defaults=defaults, config=config), available)
