"""The ``graph`` plugin: the model's graph for TensorBoard's Graphs tab, logged once."""

from __future__ import annotations

import sys
from typing import Any

from gradlog.plugin import NOT_A_PLUGIN_FAILURE, Plugin


class Graph(Plugin):
    """Logs the model's graph once (``add_graph``): after the first training step, the model
    is called again on that step's input, in eval mode, in an internal pass the other plugins
    do not see (a gradlog model through its autograd graph, a PyTorch one through
    ``torch.jit.trace``). On by default in ``gradlog train`` (``--no-graph`` turns it off)
    and in ``gl.watch`` (``graph=False``). A model that cannot be traced (data-dependent
    control flow, inputs that are not tensors) gets one warning line, and training goes on;
    a write error (``OSError``) or the run's control flow is raised, as for any plugin.
    A run resumed past its first step does not log it again.
    """

    name = "graph"
    kind = "observer"
    order = 100
    touches = ("the model's forward (a pre-hook, until the first step's input is kept)",
               "one internal forward pass, after the first step")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._input: tuple | None = None
        self._handle: Any = None
        self.done = False

    def setup(self, run: Any) -> None:
        if run.step == 0:  # a run resumed past its first step logged the graph then
            self._handle = run.hooks.register_forward_pre_hook(run.model, self._keep_input(run))

    def batch_events_every(self) -> int:
        return 1 << 40  # the first step's events only: nothing at all on the steps after it

    def _keep_input(self, run: Any) -> Any:
        def hook(module: Any, args: tuple) -> None:
            if self._input is None and run.phase == "train":
                self._input = args
        return hook

    def on_batch_end(self, run: Any, metrics: dict) -> None:
        if self.done or self._input is None:
            return
        self.done = True
        run.hooks.remove(self._handle)
        args, self._input = self._input, None
        writer = run.writer
        if writer is None or not hasattr(writer, "add_graph"):
            return  # a rank that writes nothing, or a writer without graphs
        try:
            with run.internal_pass("graph"):
                writer.add_graph(run.model, args)
        except NOT_A_PLUGIN_FAILURE:
            raise  # a full disk, or the run's control flow: not a tracing problem
        except Exception as exc:  # noqa: BLE001 -- any model's tracing problem, said once
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            print(f"warning: graph: the model's graph was not logged ({type(exc).__name__}: "
                  f"{first}); turn it off with --no-graph or gl.watch(..., graph=False)",
                  file=sys.stderr, flush=True)
