"""Writing TOML (``tomllib`` only reads it): the tables of ``run.toml``, whose values are what a
TOML file or a ``-p`` option can hold: strings, booleans, numbers, arrays and inline tables."""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["dumps", "value"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name, ensure_ascii=False)


def value(v: Any) -> str:
    """One TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON's escapes are TOML's
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }" \
            if v else "{}"
    raise TypeError(f"a TOML value cannot be a {type(v).__name__}: {v!r}")


def dumps(tables: list[tuple[tuple[str, ...], dict, str]]) -> str:
    """``[(("a",), {...}, comment), (("b", "c"), {...}, "")]`` as the tables ``[a]`` and
    ``[b.c]``, in order, each after its comment line (if any); a table's dict values are
    inline tables."""
    lines: list[str] = []
    for path, table, comment in tables:
        if lines:
            lines.append("")
        if comment:
            lines.append(f"# {comment}")
        lines.append("[" + ".".join(key(part) for part in path) + "]")
        lines += [f"{key(k)} = {value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
