"""The enabled plugins' lifecycle in one run: each plugin's registrar, view and generator, its
``setup`` and ``teardown``, and the plugins' part of a checkpoint. The run (``run.py``) says
when; this object alone touches the slots' per-run objects."""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

from ..serialization import check_saveable
from .direct_hooks import DirectHooks
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
        self._direct_hooks: DirectHooks | None = None

    @property
    def slots(self) -> list[Slot]:
        return self._dispatcher.slots

    def prepare(self, run: Any, model: Any, optimizer: Any) -> None:
        """Each plugin's registrar, its view of ``run`` and its generator (seeded from the
        run's seed and the plugin's name, unless a checkpoint restored it). Hooks a plugin
        registers on ``model`` or ``optimizer`` directly are noted from now on."""
        self._direct_hooks = DirectHooks(self._engine, model, optimizer)
        for slot in self.slots:
            slot.registrar = HookRegistrar(
                slot, model=model, optimizer=optimizer, passes=self._passes,
                policy=self._policy, replacements=self._replacements, engine=self._engine)
            slot.view = PluginRun(run, slot, self._passes)
            self._direct_hooks.watch_events(slot)
            if slot.generator is None:
                slot.generator = self._engine.new_generator(
                    (self._seed * 1_000_003 + zlib.crc32(slot.name.encode())) % (2 ** 63))

    def set_up(self) -> None:
        """Every plugin's ``setup``: one failure disables an observer; a configuration error
        is the user's and stops the run."""
        policy = dataclasses.replace(self._policy, max_failures=1,
                                     passes_through=(PluginConfigError,))
        for slot in self.slots:
            invoke(slot, "setup", self._direct_hooks.watched(slot, slot.plugin.setup),
                   kwargs={"run": slot.view}, policy=policy)
            self.set_up_slots.append(slot)

    def tear_down(self, started: bool) -> None:
        """Remove every plugin's hooks; ``teardown`` for the enabled ones of a started run
        (their errors are reported, never raised); then the hooks a plugin registered
        directly, with a message naming it."""
        quiet = dataclasses.replace(self._policy, warn_only=True)
        for slot in self.slots:
            if slot.registrar is not None:
                slot.registrar.remove_all()
            if slot.enabled and started:
                invoke(slot, "teardown", slot.plugin.teardown, kwargs={"run": slot.view},
                       policy=quiet)
            if self._direct_hooks is not None:
                self._direct_hooks.remove_left(slot, self._policy.report)

    def handles_left(self) -> int:
        return sum(len(s.registrar) for s in self.slots if s.registrar is not None)

    def disabled(self) -> list[tuple[str, str]]:
        return [(s.name, s.disabled_because) for s in self.slots
                if s.disabled_because is not None]

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Each plugin's state and its generator's. A plugin's ``state_dict()`` is called
        under the failure policy: one that fails, or holds what a checkpoint cannot
        (``gl.save``'s types, after the engine's conversion), is left out of the checkpoint and
        reported (an observer's; a mutator's stops the run)."""
        states = {}
        for slot in self.slots:
            state = invoke(slot, "state_dict", self._saveable_state, (slot,),
                           policy=self._policy, returns=True)
            if state is not None:
                states[slot.name] = state
        return {
            "plugins": states,
            "generators": {s.name: self._engine.generator_state(s.generator)
                           for s in self.slots if s.generator is not None},
        }

    def _saveable_state(self, slot: Slot) -> Any:
        state = slot.plugin.state_dict()
        try:
            check_saveable(self._engine.to_checkpoint(state), "state_dict()")
        except TypeError as exc:
            raise TypeError(f"{exc} (a checkpoint cannot hold it)") from None
        return state

    def load_state_dict(self, state: dict) -> None:
        for s in self.slots:
            if s.name in state.get("plugins", {}):
                s.plugin.load_state_dict(state["plugins"][s.name])
            gen = state.get("generators", {}).get(s.name)
            if gen is not None:
                if s.generator is None:  # restored before start(), as gradlog train resumes
                    s.generator = self._engine.new_generator(0)
                self._engine.set_generator_state(s.generator, gen)
