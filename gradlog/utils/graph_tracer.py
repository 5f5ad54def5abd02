"""The tracer ``SummaryWriter.add_graph`` turns models into ``GraphDef``s with.

The writer sits below the engines and must not import them, yet which tracer a model needs is
its engine's business (gradlog's walks its autograd graph, PyTorch's runs ``torch.jit.trace``).
So the slot lives down here: ``gradlog.engines`` installs its tracer when imported (which
``import gradlog`` does), and ``gradlog.tensorboard.graph`` reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Tracer", "set_graph_tracer", "graph_tracer"]

# tracer(model, input_to_model, verbose, strict) -> GraphDef
Tracer = Callable[[Any, Any, bool, bool], Any]

_installed: Tracer | None = None


def set_graph_tracer(tracer: Tracer) -> None:
    """Make ``tracer`` the one ``add_graph`` uses."""
    global _installed
    _installed = tracer


def graph_tracer() -> Tracer | None:
    """The installed tracer, or None."""
    return _installed
