"""Layers in model order.

The authority is the text ``model`` that ``gradlog train`` and ``gl.watch`` log: the model's
repr (PyTorch and gradlog print modules in registration order, children indented by two
spaces), then a table of its parameters in ``named_parameters()`` order (which puts a module's
``weight`` before its ``bias``). Without it (a run of another writer), the plugins' own writing
order stands in: each logging step they write the layers in ``named_modules()`` /
``named_parameters()`` order, so the wall times of one step's points sort the layers. Names
break the remaining ties, numbers compared as numbers.
"""

from __future__ import annotations

import math
import re

# "  (features): Sequential(" or, for repeats PyTorch collapses, "  (0-2): 3 x Linear(...)"
_CHILD = re.compile(r"(?P<indent> *)\((?P<name>[^()\s]+)\): (?:\d+ x )?(?P<kind>\w+)")
_ROOT = re.compile(r"(?P<kind>\w+)\(")
_RANGE = re.compile(r"(?P<first>\d+)-(?P<last>\d+)")
# a row of the parameter table: "| `features.0.weight` | (8, 1, 3, 3) | 72 | yes |"
_PARAMETER_ROW = re.compile(r"\| `(?P<name>[^`]+)` \|")


def modules(text: str) -> list[tuple[str, str]]:
    """``(dotted name, class name)`` of every module in a module repr, in order, the root
    first as ``""``: the names ``model.named_modules()`` gives for the model printed."""
    found, parents = [], []
    for line in text.splitlines():
        match = _CHILD.match(line)
        if match is None or len(match["indent"]) < 2:
            root = _ROOT.match(line)
            if root and not found:
                found.append(("", root["kind"]))
            continue
        depth = len(match["indent"]) // 2
        del parents[depth - 1:]
        prefix = "".join(f"{p}." for p in parents)
        repeat = _RANGE.fullmatch(match["name"])
        children = ([str(i) for i in range(int(repeat["first"]), int(repeat["last"]) + 1)]
                    if repeat else [match["name"]])
        found.extend((prefix + child, match["kind"]) for child in children)
        parents.append(children[-1])
    return found


def parameters(text: str) -> list[str]:
    """The parameter names of the model text's table, in ``named_parameters()`` order (none
    in a text without the table: a repr alone)."""
    return [m["name"] for m in map(_PARAMETER_ROW.match, text.splitlines()) if m]


def natural_key(name: str) -> tuple:
    """Sorts ``"2" < "10"`` and ``"conv2" < "conv10"``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in re.split(r"(\d+)", name) if part)


def owning_module(layer: str, known) -> str:
    """The module among ``known`` that ``layer`` (a module, or a parameter ``module.name``)
    is or belongs to. An undotted name ``known`` lacks is the root's (``""``): a root
    parameter (``pos_embed``), or grad-norm's ``root`` (the root module's own parameters)."""
    name = layer
    while name not in known:
        if "." not in name:
            return ""
        name = name.rpartition(".")[0]
    return name


def model_order(layers, module_names: list[str] | None, write_times: dict[str, float],
                parameter_names: list[str] | None = None) -> list[str]:
    """``layers`` sorted by their module's place in ``module_names`` (when known), then by
    their place in ``parameter_names`` (a parameter's layers; when known), then by
    ``write_times`` (seconds; missing ones last), then by name."""
    position = {name: i for i, name in enumerate(module_names or ())}
    parameter_place = {name: i for i, name in enumerate(parameter_names or ())}

    def key(layer: str) -> tuple:
        place = position.get(owning_module(layer, position), 0)
        return (place, parameter_place.get(layer, -1), write_times.get(layer, math.inf),
                natural_key(layer))

    return sorted(layers, key=key)
