"""Containers: ``Sequential`` (calls its modules in order), ``ModuleList`` and ``ModuleDict``
(hold modules so their parameters are registered, without a forward of their own)."""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .module import Module, _addindent

__all__ = ["Sequential", "ModuleList", "ModuleDict"]


def _index(idx: Any, n: int) -> int:
    """A valid non-negative position for ``idx`` in a container of ``n`` modules."""
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range")
    return idx % n


class _Indexed(Module):
    """Shared by Sequential and ModuleList: modules under the keys "0", "1", ..."""

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return type(self)._from_items(list(self._modules.items())[idx])
        return list(self._modules.values())[_index(idx, len(self))]

    def __setitem__(self, idx: int, module: Module) -> None:
        key = list(self._modules)[_index(idx, len(self))]
        self.add_module(key, module)

    def __delitem__(self, idx: int | slice) -> None:
        keys = list(self._modules)
        for key in (keys[idx] if isinstance(idx, slice) else [keys[_index(idx, len(keys))]]):
            del self._modules[key]
        self._renumber()

    def _renumber(self) -> None:
        """Keep the keys "0".."n-1" after a deletion or insertion, as PyTorch does."""
        modules = list(self._modules.values())
        self._modules.clear()
        for i, m in enumerate(modules):
            self._modules[str(i)] = m

    def append(self, module: Module) -> Any:
        """Add ``module`` at the end; returns the container."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> Any:
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        n = len(self)
        index = min(max(index + n if index < 0 else index, 0), n)
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(modules):
            self._modules[str(i)] = m

    def pop(self, key: int | slice = -1) -> Module:
        v = self[key]
        del self[key]
        return v

    def __dir__(self) -> list:
        return [k for k in super().__dir__() if not k.isdigit()]


class Sequential(_Indexed):
    """Modules called one after another, each on the previous one's output.

    ``Sequential(m1, m2, ...)`` names them "0", "1", ...; ``Sequential(OrderedDict(...))``
    uses the dict's names. Indexing, slicing (a new Sequential sharing the modules), ``len``,
    iteration and ``append`` work as on a list.
    """

    def __init__(self, *args: Module) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    @classmethod
    def _from_items(cls, items: list) -> Sequential:
        return cls(OrderedDict(items))

    def __add__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but "
                             f"{type(other)} is given.")
        return Sequential(*self, *other)

    def forward(self, input: Any) -> Any:
        for module in self:
            input = module(input)
        return input


class ModuleList(_Indexed):
    """A list of modules, registered so ``parameters()`` and ``state_dict()`` see them."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    @classmethod
    def _from_items(cls, items: list) -> ModuleList:
        return cls([m for _, m in items])

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self, *other])

    def __repr__(self) -> str:
        """Runs of identical modules are shown once, as ``(0-2): 3 x Linear(...)``."""
        lines, groups = [], []
        for i, m in enumerate(self):
            text = repr(m)
            if groups and groups[-1][2] == text:
                groups[-1][1] = i
            else:
                groups.append([i, i, text])
        for start, end, text in groups:
            label = f"({start})" if start == end else f"({start}-{end}): {end - start + 1} x"
            sep = ": " if start == end else " "
            lines.append(label + sep + _addindent(text, 2))
        if not lines:
            return "ModuleList()"
        return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """An ordered dict of modules, registered under their keys."""

    def __init__(self, modules: Mapping[str, Module] | Iterable | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def clear(self) -> None:
        self._modules.clear()

    def pop(self, key: str) -> Module:
        v = self[key]
        del self[key]
        return v

    def keys(self) -> Iterable[str]:
        return self._modules.keys()

    def items(self) -> Iterable[tuple[str, Module]]:
        return self._modules.items()

    def values(self) -> Iterable[Module]:
        return self._modules.values()

    def update(self, modules: Mapping[str, Module] | Iterable) -> None:
        """Add (key, module) pairs from a mapping or an iterable of pairs."""
        items = modules.items() if isinstance(modules, Mapping) else modules
        for j, item in enumerate(items):
            if not isinstance(modules, Mapping) and len(item) != 2:
                raise ValueError(f"ModuleDict update sequence element #{j} has length "
                                 f"{len(item)}; 2 is required")
            key, module = item
            self[key] = module
