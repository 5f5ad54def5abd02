"""Choosing parameters and modules by name: the ``include``/``exclude`` globs of the built-in
plugins that log per layer (and of any plugin that wants the same rule)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

__all__ = ["selected"]


def selected(names: Iterable[str], include: Iterable[str], exclude: Iterable[str]) -> bool:
    """Whether one of ``names`` (e.g. a parameter's name and its module's) matches a glob of
    ``include`` and none matches a glob of ``exclude`` (``fnmatch`` rules, case-sensitive)."""
    names = list(names)

    def matches(globs: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(n, g) for g in globs for n in names)
    return matches(include) and not matches(exclude)
