"""grad-noise: annealed Gaussian gradient noise (Neelakantan et al. 2015, arXiv 1511.06807)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gradlog.plugin import Plugin

__all__ = ["GradNoise"]


@dataclass
class Options:
    eta: float = field(default=0.01, metadata={
        "help": "noise variance at step 0; the paper picks eta from {0.01, 0.3, 1.0}",
        "min": 0.0})
    gamma: float = field(default=0.55, metadata={
        "help": "decay exponent: the variance at step t is eta / (1 + t)^gamma", "min": 0.0})
    log_every: int = field(default=1, metadata={
        "help": "log grad-noise/std every N optimizer steps", "min": 1})


class GradNoise(Plugin):
    """Annealed Gaussian gradient noise: adds N(0, eta / (1 + t)^gamma) to every gradient.

    t counts the optimizer steps this plugin has noised (kept in checkpoints, so a resumed
    run continues the schedule). The noise comes from the plugin's own seeded generator: the
    global random stream, and so data order, dropout and initialisation, are unchanged, and a
    run is reproducible with the same seed. It runs in the optimizer's step pre-hook after
    grad-clip (order 10), so clipped gradients receive the noise, as in the paper.

    Logs grad-noise/std (the standard deviation added at that step).
    """

    name = "grad-noise"
    kind = "mutator"
    order = 20
    touches = ("gradients before the optimizer step (in place)",)
    Options = Options

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        self.t = 0

    def std(self, t: int) -> float:
        """The noise standard deviation at step ``t``: sqrt(eta / (1 + t)^gamma)."""
        return math.sqrt(self.options.eta / (1.0 + t) ** self.options.gamma)

    def on_before_optimizer_step(self, run) -> None:
        std = self.std(self.t)
        if std > 0:
            with run.engine.no_grad():
                for p in run.model.parameters():
                    g = p.grad
                    if g is not None:
                        g.add_(g.detach().clone().normal_(0.0, std, generator=run.rng))
        if run.step % self.options.log_every == 0:
            run.log_scalar("grad-noise/std", std)
        self.t += 1

    def state_dict(self) -> dict:
        return {"t": self.t}

    def load_state_dict(self, state: dict) -> None:
        self.t = int(state.get("t", 0))
