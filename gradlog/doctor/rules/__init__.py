"""The doctor's rules, one per finding kind, and the function that runs them all."""

from __future__ import annotations

from ..findings import KINDS, Finding
from ..trace import Trace
from . import activations, gradients, losses, updates
from .base import Rule

__all__ = ["Rule", "RULES", "rules_with", "parse_override", "diagnose"]

RULES: dict[str, Rule] = {rule.kind: rule for rule in (
    gradients.RULES + updates.RULES + activations.RULES + losses.RULES)}
assert set(RULES) == set(KINDS), "every kind has a rule"


def rules_with(overrides: dict[str, dict] | None = None) -> dict[str, Rule]:
    """The rules, with ``{kind: {threshold: value}}`` replacing some thresholds; an unknown
    kind is a ValueError naming the kinds."""
    overrides = overrides or {}
    unknown = sorted(set(overrides) - set(RULES))
    if unknown:
        raise ValueError(f"no doctor rule {unknown[0]!r}; the rules: {', '.join(RULES)}")
    return {kind: rule.with_options(overrides.get(kind, {})) for kind, rule in RULES.items()}


def parse_override(text: str) -> tuple[str, str, float]:
    """``"KIND.KEY=VALUE"`` (e.g. ``vanishing_gradient.relative=1e-3``) as ``(kind, key,
    number)``; a ValueError says what is wrong."""
    name, sep, value = text.partition("=")
    kind, dot, key = name.strip().partition(".")
    if not sep or not dot or not key:
        raise ValueError(f"expected KIND.KEY=VALUE (e.g. vanishing_gradient.relative=1e-3), "
                         f"got {text!r}")
    try:
        number = float(value) if any(c in value for c in ".eE") else int(value)
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not a number") from None
    return kind, key, number


def diagnose(trace: Trace, rules: dict[str, Rule] | None = None) -> list[Finding]:
    """Every finding of ``rules`` (default: all, with their default thresholds) on ``trace``,
    by first step, then in the order of ``KINDS``."""
    rules = RULES if rules is None else rules
    found = [f for f in (rule.run(trace) for rule in rules.values()) if f is not None]
    return sorted(found, key=lambda f: (f.first_step, KINDS.index(f.kind)))
