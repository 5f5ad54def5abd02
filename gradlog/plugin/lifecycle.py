"""The enabled plugins' lifecycle in one run: each plugin's registrar, view and generator, its
``setup`` and ``teardown``, and the plugins' part of a checkpoint. The run (``run.py``) says
when; this object alone touches the slots' per-run objects."""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

from .dispatch import Slot
from .errors import PluginConfigError
from .policy import invoke
from .registrar import HookRegistrar
from .view import PluginRun

__all__ = ["PluginLifecycle"]


class PluginLifecycle:
    """Set-up, tear-down and checkpoint state of the plugins of ``dispatcher``."""

    def __init__(self, dispatcher: Any, policy: Any, passes: Any, replacements: Any,
                 engine: Any, seed: int) -> None:
        self._dispatcher = dispatcher
        self._policy = policy
        self._passes = passes
        self._replacements = replacements
        self._engine = engine
        self._seed = seed
        self.set_up_slots: list[Slot] = []  # those whose setup ran (they hear of a failure)

    @property
    def slots(self) -> list[Slot]:
        return self._dispatcher.slots

    def prepare(self, run: Any, model: Any, optimizer: Any) -> None:
        """Each plugin's registrar, its view of ``run`` and its generator (seeded from the
        run's seed and the plugin's name, unless a checkpoint restored it)."""
        for slot in self.slots:
            slot.registrar = HookRegistrar(
                slot, model=model, optimizer=optimizer, passes=self._passes,
                policy=self._policy, replacements=self._replacements, engine=self._engine)
            slot.view = PluginRun(run, slot, self._passes)
            if slot.generator is None:
                slot.generator = self._engine.new_generator(
                    (self._seed * 1_000_003 + zlib.crc32(slot.name.encode())) % (2 ** 63))

    def set_up(self) -> None:
        """Every plugin's ``setup``: one failure disables an observer; a configuration error
        is the user's and stops the run."""
        policy = dataclasses.replace(self._policy, max_failures=1,
                                     passes_through=(PluginConfigError,))
        for slot in self.slots:
            invoke(slot, "setup", slot.plugin.setup, kwargs={"run": slot.view}, policy=policy)
            self.set_up_slots.append(slot)

    def tear_down(self, started: bool) -> None:
        """Remove every plugin's hooks; ``teardown`` for the enabled ones of a started run
        (their errors are reported, never raised)."""
        quiet = dataclasses.replace(self._policy, warn_only=True)
        for slot in self.slots:
            if slot.registrar is not None:
                slot.registrar.remove_all()
            if slot.enabled and started:
                invoke(slot, "teardown", slot.plugin.teardown, kwargs={"run": slot.view},
                       policy=quiet)

    def handles_left(self) -> int:
        return sum(len(s.registrar) for s in self.slots if s.registrar is not None)

    def disabled(self) -> list[tuple[str, str]]:
        return [(s.name, s.disabled_because) for s in self.slots
                if s.disabled_because is not None]

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Each plugin's state and its generator's."""
        return {
            "plugins": {s.name: s.plugin.state_dict() for s in self.slots},
            "generators": {s.name: self._engine.generator_state(s.generator)
                           for s in self.slots if s.generator is not None},
        }

    def load_state_dict(self, state: dict) -> None:
        for s in self.slots:
            if s.name in state.get("plugins", {}):
                s.plugin.load_state_dict(state["plugins"][s.name])
            gen = state.get("generators", {}).get(s.name)
            if gen is not None:
                if s.generator is None:  # restored before start(), as gradlog train resumes
                    s.generator = self._engine.new_generator(0)
                self._engine.set_generator_state(s.generator, gen)
