"""The ``dead-relu`` plugin: how many ReLU units output zero for a whole batch.

A unit (one feature, or one channel at one position) that outputs zero for every example of
a batch gets no gradient from that batch; when the fraction of such units grows, the layer
is dying. The plugin puts a forward hook on every module whose type is named ``ReLU`` and, on
logging steps only, logs ``dead-relu/<module>``, the fraction of that module's units whose
output is zero for the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gradlog.plugin import Plugin


@dataclass
class Options:
    every: int = field(default=50, metadata={
        "help": "log every N optimizer steps (steps 0, N, 2N, ...); nothing runs on the others",
        "min": 1})


class DeadReLU(Plugin):
    """Fraction of dead ReLU units per ReLU module, as dead-relu/<module>, every N steps.

    A unit is dead for a batch when it outputs zero for every example in it. Only training
    forwards count (not validation, not other plugins' probe passes).
    """

    name = "dead-relu"
    kind = "observer"
    order = 100
    Options = Options
    touches = ("forward hooks on ReLU modules",)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._fractions: dict[str, float] = {}

    def setup(self, run: Any) -> None:
        relus = [(name or "root", m) for name, m in run.model.named_modules()
                 if type(m).__name__ == "ReLU"]
        if not relus:
            import warnings
            warnings.warn("dead-relu: the model has no ReLU module; nothing will be logged",
                          RuntimeWarning, stacklevel=2)
        for name, module in relus:
            run.hooks.register_forward_hook(module, self._hook(name, run))

    def _hook(self, name: str, run: Any) -> Any:
        def record(module: Any, args: Any, output: Any) -> None:
            if run.phase != "train" or run.step % self.options.every:
                return  # the cost on other steps: one comparison
            out = run.engine.to_numpy(output)  # read-only, any engine's tensor
            if out.ndim < 2:  # no batch dimension: every value is its own unit
                out = out.reshape(1, -1)
            alive = np.any(out != 0, axis=0)
            self._fractions[name] = 1.0 - float(np.mean(alive))
        return record

    def on_batch_end(self, *, run: Any) -> None:
        for name, fraction in self._fractions.items():
            run.log_scalar(f"dead-relu/{name}", fraction)
        self._fractions.clear()
