"""A docstring as plain text for a terminal: reStructuredText's inline markup removed
(````code````, ```default role```, ``:role:`target```, ``*emphasis*``) and each paragraph
wrapped again, so that ``gradlog plugins show`` prints what a person reads, not markup."""

from __future__ import annotations

import inspect
import re
import textwrap

__all__ = ["plain_text"]

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?\.?([^`]+)`")   # :class:`~.trace.Trace` -> Trace
_LITERAL = re.compile(r"``([^`]+)``|`([^`]+)`")
_EMPHASIS = re.compile(r"(?<![\w*])\*\*?([^*\s][^*]*?)\*\*?(?![\w*])")


def _inline(text: str) -> str:
    text = _ROLE.sub(lambda m: m.group(1).rpartition(".")[2] if m.group(0).count("~") else
                     m.group(1), text)
    text = _LITERAL.sub(lambda m: m.group(1) or m.group(2), text)
    return _EMPHASIS.sub(r"\1", text)


def plain_text(docstring: str | None, width: int = 88) -> str:
    """``docstring`` without inline markup, its paragraphs wrapped to ``width`` columns; an
    indented block (an example command, a list item's continuation) keeps its lines."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(docstring or ""))
    out = []
    for paragraph in paragraphs:
        lines = paragraph.splitlines()
        if any(line.startswith((" ", "-", "*")) for line in lines):
            out.append("\n".join(_inline(line) for line in lines))
        else:
            out.append(textwrap.fill(_inline(" ".join(lines)), width=width,
                                     break_long_words=False, break_on_hyphens=False))
    return "\n\n".join(out).strip()
