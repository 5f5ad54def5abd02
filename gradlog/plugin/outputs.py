"""Naming what a module returns, for plugins that log or use module outputs.

A module may return one tensor or a container of them (``nn.LSTM``: ``(output, (h, c))``;
``nn.MultiheadAttention``: ``(output, weights)``; a block: ``(down, skip)``; a Hugging Face
model: a ``ModelOutput``, which is a dict), and may run several times in one forward pass (a
shared block, a reused ``nn.ReLU``). The names, the same in every plugin:

* ``<module>`` for the module's first call in a forward pass, ``<module>-1``, ``<module>-2``,
  ... for its later calls in the same pass (``-``: TensorBoard tags keep ``[A-Za-z0-9_./-]``,
  and ``.`` already separates submodules and container entries);
* after that, ``.<i>`` for the items of a tuple or list and ``.<key>`` for the entries of a
  dict (``ModelOutput`` included) and the fields of a dataclass, nested as deep as they go:
  ``lstm.0`` is an LSTM's output sequence, ``lstm.1.0`` its final hidden state;
  ``bert.last_hidden_state``; ``None`` entries are left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["named_tensors", "call_name", "pick_output", "describe_output"]


def call_name(module: str, call: int) -> str:
    """The name of a module's ``call``-th call (0: the first) in a forward pass."""
    return module if call == 0 else f"{module}-{call}"


def _entries(value: Any) -> list[tuple[str, Any]] | None:
    """A container's entries as (suffix, value), or None for a leaf."""
    if isinstance(value, Mapping):
        return [(f".{k}", v) for k, v in value.items()]
    if isinstance(value, (tuple, list)):
        return [(f".{i}", v) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f".{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    return None


def named_tensors(output: Any, is_tensor: Callable[[Any], bool],
                  name: str = "") -> list[tuple[str, Any]]:
    """Every tensor in ``output``, in order, named ``name`` followed by its path (see the
    module docstring); anything that is neither a tensor nor a container is left out."""
    found: list[tuple[str, Any]] = []
    stack: list[tuple[str, Any]] = [(name, output)]
    while stack:  # (iterative, depth first, in the containers' order)
        path, value = stack.pop()
        if is_tensor(value):
            found.append((path, value))
            continue
        entries = _entries(value)
        if entries:
            stack.extend((path + suffix, v) for suffix, v in reversed(entries))
    return found


def pick_output(output: Any, key: str | int) -> Any:
    """``output[key]`` for a tuple/list index or a dict key, a dataclass field by name;
    a ``KeyError`` naming the keys there are otherwise."""
    entries = _entries(output)
    if entries is None:
        raise KeyError(f"the output is a {type(output).__name__}, not a tuple, list, dict or "
                       f"dataclass: there is no {key!r} in it")
    wanted = f".{key}"
    for suffix, value in entries:
        if suffix == wanted:
            return value
    raise KeyError(f"no {key!r} in the output; it has: "
                   f"{', '.join(s[1:] for s, _ in entries) or '(nothing)'}")


def describe_output(output: Any, is_tensor: Callable[[Any], bool]) -> str:
    """A one-line description of what a module returned: its type and each tensor's shape."""
    tensors = named_tensors(output, is_tensor)
    if is_tensor(output):
        return f"a tensor of shape {tuple(output.shape)}"
    shapes = ", ".join(f"{path[1:]}: {tuple(t.shape)}" for path, t in tensors)
    return f"a {type(output).__name__} ({shapes or 'no tensors'})"
