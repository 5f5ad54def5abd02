"""Internal passes: a plugin's own forward/backward passes (probes, attacks), hidden from the
other plugins and leaving the training state exactly as it was.

Inside ``InternalPasses.enter(slot, kind)`` the run's phase is ``kind``, other plugins' hooks
are skipped (their registrars ask ``hides``), and the global random functions draw from the
plugin's own generator. Afterwards the model's train/eval modes, its buffers (BatchNorm
running statistics), every parameter's ``.grad`` and the engine's global random state are
restored (``engine.training_state_kept`` and the engine's random state), so the same code
serves every engine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["InternalPasses"]


class InternalPasses:
    """Who owns the internal pass in progress (at most one: a nested pass is part of the
    outer one)."""

    def __init__(self, run: Any) -> None:
        self._run = run
        self.owner: Any = None

    def hides(self, slot: Any) -> bool:
        """Whether ``slot``'s hooks must stay silent now (another plugin's pass runs)."""
        return self.owner is not None and self.owner is not slot

    @contextlib.contextmanager
    def enter(self, slot: Any, kind: str) -> Iterator[None]:
        if self.owner is not None:
            yield
            return
        run = self._run
        engine = run.engine
        rng_state = engine.random_state()
        self.owner = slot
        try:
            with engine.training_state_kept(run.model), run.driver.in_phase(kind), \
                    engine.use_generator(slot.generator) as drawing:
                slot.drawing = drawing
                try:
                    yield
                finally:
                    slot.drawing = None
        finally:
            self.owner = None
            engine.set_random_state(rng_state)
