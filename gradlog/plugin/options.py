"""Plugin options: the ``-p NAME[:key=value,...]`` grammar, ``[plugins.NAME]`` TOML tables,
and validation of values against a typed ``Options`` dataclass (a plugin's, and the same for
``gradlog train``'s own settings), with a did-you-mean for misspelled names.

A value is read as a TOML literal when it parses as one (numbers, ``true``/``false``, quoted
strings, arrays such as ``include=["fc*","conv*"]``), otherwise as a bare string; commas
inside brackets or quotes do not split.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
import types
import typing
from typing import Any

from .errors import PluginConfigError

__all__ = ["parse_spec", "parse_value", "validate_options", "check_values", "describe_options",
           "load_config", "did_you_mean", "UnknownOption", "BadValue"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def did_you_mean(name: str, choices: Any) -> str:
    """``" did you mean 'x'?"`` for the choice closest to a misspelled ``name``, else ``""``."""
    close = difflib.get_close_matches(name, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" did you mean '{close[0]}'?" if close else ""


def parse_value(text: str) -> Any:
    """A TOML literal if ``text`` is one, else the bare string."""
    text = text.strip()
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _split_top_level(text: str, spec: str) -> list[str]:
    parts, depth, quote, current = [], 0, None, []
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth < 0:
                raise PluginConfigError(f"malformed plugin option string '{spec}': unbalanced "
                                        f"'{ch}'")
        elif ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    if quote or depth:
        raise PluginConfigError(f"malformed plugin option string '{spec}': unclosed "
                                f"{'quote' if quote else 'bracket'}")
    parts.append("".join(current))
    return parts


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Parse ``NAME[:key=value[,key=value...]]`` into ``(name, {key: value})``."""
    if not isinstance(spec, str) or not spec.strip():
        raise PluginConfigError("empty plugin specification (expected NAME[:key=value,...])")
    name, sep, rest = spec.strip().partition(":")
    name = name.strip()
    if not _NAME.match(name):
        raise PluginConfigError(f"malformed plugin specification '{spec}': '{name}' is not a "
                                "plugin name (expected NAME[:key=value,...])")
    options: dict[str, Any] = {}
    if not sep:
        return name, options
    if not rest.strip():
        raise PluginConfigError(f"malformed plugin specification '{spec}': nothing after ':' "
                                "(expected NAME:key=value[,key=value...])")
    for part in _split_top_level(rest, spec):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not key:
            raise PluginConfigError(f"malformed plugin option '{part.strip()}' in '{spec}' "
                                    "(expected key=value)")
        if key in options:
            raise PluginConfigError(f"option '{key}' given twice in '{spec}'")
        options[key] = parse_value(value)
    return name, options


def load_config(path: str) -> dict:
    """Read a TOML config file; errors name the file and the problem."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise PluginConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise PluginConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PluginConfigError(f"malformed TOML in config file {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise PluginConfigError(f"config file {path} is not UTF-8 text (byte {exc.start}: "
                                f"{exc.reason})") from None


# -- validation ------------------------------------------------------------------------------
def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return f"list of {_type_name(args[0])}" if args else "list"
    if tp is type(None):
        return "none"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any) -> Any:
    """``value`` as type ``tp``, or raise TypeError/ValueError (no lossy conversions)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value in choices:
            return value
        raise ValueError(f"must be one of {', '.join(repr(c) for c in choices)}")
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        raise TypeError(f"expected {_type_name(tp)}")
    if origin in (list, tuple):
        (item_tp, *_rest) = typing.get_args(tp) or (Any,)
        items = value if isinstance(value, (list, tuple)) else [value]
        out = [_coerce(v, item_tp) for v in items]
        return tuple(out) if origin is tuple else out
    if tp is type(None):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        raise TypeError("expected none")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise TypeError("expected true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError("expected an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and value.lower() in ("inf", "+inf", "-inf", "nan"):
            return float(value)
        raise TypeError("expected a number")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # e.g. layer=3 names the module "3"
        raise TypeError("expected a string")
    if isinstance(value, tp):
        return value
    raise TypeError(f"expected {_type_name(tp)}")


def _check_range(value: Any, meta: Any) -> None:
    lo, hi = meta.get("min"), meta.get("max")
    if (lo is not None or hi is not None) and isinstance(value, float) and \
            not math.isfinite(value) and (math.isnan(value) or not meta.get("infinite")):
        # nan passes every comparison; inf only where the field gives it a meaning
        raise ValueError("must be a finite number")
    if lo is not None and value is not None and meta.get("min_open") and value <= lo:
        raise ValueError(f"must be > {lo}")
    if lo is not None and value is not None and value < lo:
        raise ValueError(f"must be >= {lo}")
    if hi is not None and value is not None and value > hi:
        raise ValueError(f"must be <= {hi}")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ValueError(f"must be one of {', '.join(repr(c) for c in choices)}")


class UnknownOption(ValueError):
    """A key that ``options_cls`` has no field for (``known``: the fields, in order)."""

    def __init__(self, key: str, known: list[str]) -> None:
        self.key, self.known = key, known
        super().__init__(f"unknown option '{key}'")


class BadValue(ValueError):
    """A value of the wrong type or out of range for ``key`` (``type_name``: its type)."""

    def __init__(self, key: str, value: Any, type_name: str, problem: str) -> None:
        self.key, self.value, self.type_name, self.problem = key, value, type_name, problem
        super().__init__(f"bad value {value!r} for '{key}' ({type_name}): {problem}")


def check_values(options_cls: Any, given: dict) -> dict:
    """``given`` with every value coerced to its field's type in ``options_cls`` and checked
    against the field's ``min``/``max``/``choices`` metadata. Raises :class:`UnknownOption`
    for a key without a field (the first, in sorted order) and :class:`BadValue`."""
    fields = {f.name: f for f in dataclasses.fields(options_cls)}
    hints = typing.get_type_hints(options_cls)
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise UnknownOption(unknown[0], list(fields))
    values = {}
    for key, value in given.items():
        try:
            coerced = _coerce(value, hints[key])
            _check_range(coerced, fields[key].metadata)
        except (TypeError, ValueError) as exc:
            raise BadValue(key, value, _type_name(hints[key]), str(exc)) from None
        values[key] = coerced
    return values


def validate_options(plugin_name: str, options_cls: Any, given: dict) -> Any:
    """An instance of ``options_cls`` from ``given``; errors name the plugin, key and the
    accepted values."""
    if options_cls is None:
        if given:
            raise PluginConfigError(f"plugin '{plugin_name}' takes no options, got "
                                    f"{', '.join(sorted(given))}")
        return None
    try:
        values = check_values(options_cls, given)
    except UnknownOption as exc:
        raise PluginConfigError(
            f"plugin '{plugin_name}' has no option '{exc.key}';{did_you_mean(exc.key, exc.known)}"
            f" its options are: {', '.join(exc.known) or '(none)'}") from None
    except BadValue as exc:
        raise PluginConfigError(
            f"plugin '{plugin_name}': bad value {exc.value!r} for option '{exc.key}' "
            f"({exc.type_name}): {exc.problem}") from None
    try:
        options = options_cls(**values)
    except (TypeError, ValueError) as exc:
        raise PluginConfigError(f"plugin '{plugin_name}': {exc}") from None
    check = getattr(options, "validate", None)
    if callable(check):
        try:
            check()
        except (TypeError, ValueError) as exc:
            raise PluginConfigError(f"plugin '{plugin_name}': {exc}") from None
    return options


def describe_options(options_cls: Any) -> list[dict]:
    """Name, type, default and help of each option (for ``gradlog plugins show``)."""
    if options_cls is None:
        return []
    hints = typing.get_type_hints(options_cls)
    out = []
    for f in dataclasses.fields(options_cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        out.append({"name": f.name, "type": _type_name(hints[f.name]), "default": default,
                    "help": f.metadata.get("help", ""), "min": f.metadata.get("min"),
                    "max": f.metadata.get("max"),
                    "min_open": bool(f.metadata.get("min_open"))})
    return out
