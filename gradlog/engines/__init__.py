"""Engines: one object per run (``run.engine``) for what differs between the libraries gradlog
can watch. ``engine_for(model)`` picks the engine from the model's type; torch is imported only
when the model is a torch module.

Each module of this package but ``base`` holds one engine (a subclass of ``Engine``, which
registers itself): a third engine is one new file here. Importing this package gives
``SummaryWriter.add_graph`` its tracer: the model's engine's ``graph_def``.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from ..utils.graph_tracer import set_graph_tracer
from .base import Collectives, Engine, Handles, map_tensors, read_only

__all__ = ["Engine", "Handles", "Collectives", "engine_for", "engine_classes", "engine_named",
           "seed_loaded_engines", "map_tensors", "read_only"]


def engine_classes() -> list[type[Engine]]:
    """Every engine of this package, in module-name order (importing an engine module is
    cheap: its library is imported only when an engine object is created)."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        # (launchers/: how engines start ranks; _name: an engine's helpers)
        if info.name != "base" and not info.ispkg and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return list(Engine.registered)


def engine_for(model: Any) -> Engine:
    """A new engine object for ``model`` (a ``gradlog.nn.Module`` or a ``torch.nn.Module``)."""
    classes = engine_classes()
    for cls in classes:
        if cls.claims(model):
            return cls()
    kind = f"{type(model).__module__}.{type(model).__qualname__}"
    raise TypeError(f"gradlog cannot watch a {kind}: the model must be a module of one of "
                    f"the engines {', '.join(c.name for c in classes)} (gradlog.nn.Module, "
                    "torch.nn.Module)")


def engine_named(name: str) -> type[Engine]:
    """The engine class called ``name`` (``"gradlog"``, ``"torch"``)."""
    classes = engine_classes()
    for cls in classes:
        if cls.name == name:
            return cls
    raise ValueError(f"no engine named {name!r}; the engines are "
                     f"{', '.join(repr(c.name) for c in classes)}")


def seed_loaded_engines(seed: int) -> None:
    """Seed the global generator of every engine whose library is imported."""
    for cls in engine_classes():
        cls.seed_if_loaded(seed)


def _graph_def(model: Any, input_to_model: Any, verbose: bool, strict: bool) -> Any:
    """``add_graph``'s tracer: the model's engine traces it."""
    return engine_for(model).graph_def(model, input_to_model, verbose, strict)


set_graph_tracer(_graph_def)
