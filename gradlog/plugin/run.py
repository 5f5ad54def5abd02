"""The ``Run``: what plugins see (model, optimizer, writer, step, epoch, phase, probe sets,
logging, the scoped hook registrar, internal passes) and the event driver shared by
``gradlog train`` and ``gl.watch``.

``run.step`` counts completed optimizer steps and starts at 0: everything about batch k is
logged at step k; the counter moves to k + 1 when batch k ends.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import adapter
from .dispatch import Dispatcher, Slot
from .errors import CONTROL_FLOW, PluginConfigError, PluginError, SkipStep
from .registrar import HookRegistrar

__all__ = ["Run"]


def _warn(message: str) -> None:
    import warnings
    warnings.warn(message, RuntimeWarning, stacklevel=3)


class Run:
    """One training run with plugins attached. Create it with ``gl.watch(...)`` (your own
    loop) or let ``gradlog train`` create it.

    In your own loop, announce what the hooks cannot see: ``x, y = run.batch(x, y)`` (needed by
    plugins that use labels or replace inputs), ``run.epoch_end()``,
    ``run.validation_end(metrics)``; log with ``run.log_scalar(tag, value)``.
    Each plugin's ``plugins/<name>/ms_per_step`` is logged every ``telemetry_every`` steps and
    at each epoch end (``telemetry_every=0`` turns it off, as ``PluginHarness`` does).
    """

    def __init__(self, model: Any, optimizer: Any = None, writer: Any = None, *,
                 plugins: Any = (), strict: bool = False, max_failures: int = 3,
                 probe_sets: dict | None = None, config: dict | None = None, seed: int = 0,
                 auto_batches: bool = True, telemetry_every: int = 50,
                 owns_writer: bool = True, report: Any = None) -> None:
        self.model = model
        self.optimizer = optimizer
        self.writer = writer
        self.step = 0
        self.epoch = 0
        self.phase = "train"
        self.probe_sets = dict(probe_sets or {})
        self.config = dict(config or {})
        self.seed = seed
        self.strict = strict
        self.report = report or _warn  # report(message): a plugin failure, said at once
        self.skipped_steps = 0
        self._owns_writer = owns_writer
        self._auto_batches = auto_batches
        self._telemetry_every = telemetry_every
        self._steps_since_telemetry = 0
        self._active: Slot | None = None
        self._internal: Slot | None = None
        names = [p.name for p in plugins]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise PluginConfigError(f"plugin '{dupes[0]}' is enabled twice")
        slots = [Slot(p, i) for i, p in enumerate(plugins)]
        self._dispatcher = Dispatcher(self, slots, strict=strict, max_failures=max_failures)
        self._framework_handles: list = []
        self._in_batch = False
        self._stepped = False
        self._metrics: dict = {}
        self._replaced: dict[str, None] = {}  # which plugins replaced values in this batch
        self._state = "new"

    # -- what plugins use ----------------------------------------------------------------
    @property
    def plugins(self) -> list:
        """The enabled plugins in dispatch order."""
        return [s.plugin for s in self._dispatcher.slots if s.enabled]

    def plugin(self, name: str) -> Any:
        for s in self._dispatcher.slots:
            if s.name == name:
                return s.plugin
        raise KeyError(f"no plugin '{name}' in this run")

    @property
    def hooks(self) -> HookRegistrar:
        """The calling plugin's scoped hook registrar."""
        return self._current("run.hooks").registrar

    @property
    def rng(self) -> Any:
        """The calling plugin's own seeded generator (never the global stream)."""
        return self._current("run.rng").generator

    def _current(self, what: str) -> Slot:
        if self._active is None:
            raise RuntimeError(f"{what} is available to plugins inside their setup, events and "
                               "hooks only")
        return self._active

    def log_scalar(self, tag: str, value: Any, step: int | None = None) -> None:
        """Log a scalar at ``step`` (default: the current step). Values logged from your own
        loop also reach the plugins' ``on_batch_end(metrics)``."""
        v = float(adapter.to_numpy(value))
        if self._active is None:
            self._metrics[tag] = v
        if self.writer is not None:
            self.writer.add_scalar(tag, v, self.step if step is None else step)

    def log_histogram(self, tag: str, values: Any, step: int | None = None,
                      bins: Any = "tensorflow") -> None:
        if self.writer is not None:
            self.writer.add_histogram(tag, adapter.to_numpy(values),
                                      self.step if step is None else step, bins=bins)

    def log_image(self, tag: str, image: Any, step: int | None = None,
                  dataformats: str = "CHW") -> None:
        if self.writer is not None:
            self.writer.add_image(tag, adapter.to_numpy(image),
                                  self.step if step is None else step, dataformats=dataformats)

    def log_text(self, tag: str, text: str, step: int | None = None) -> None:
        if self.writer is not None:
            self.writer.add_text(tag, text, self.step if step is None else step)

    @contextlib.contextmanager
    def internal_pass(self, kind: str) -> Iterator[None]:
        """A plugin's own forward/backward passes (probes, attacks) inside this block are
        invisible to other plugins; the model's train/eval modes, its buffers, the parameters'
        ``.grad`` and the global random state are restored afterwards, and the global random
        functions draw from the plugin's own generator."""
        owner = self._current("run.internal_pass")
        if self._internal is not None:
            yield
            return
        model = self.model
        modes = [(m, m.training) for m in model.modules()]
        buffers = [(m, name, b, np.array(adapter.to_numpy(b)))
                   for m in model.modules() for name, b in m.named_buffers(recurse=False)]
        params = list(model.parameters())
        grads = [p.grad for p in params]
        for p in params:
            p.grad = None
        rng_state = adapter.random_state()
        phase = self.phase
        self._internal, self.phase = owner, kind
        try:
            with adapter.use_generator(owner.generator):
                yield
        finally:
            self._internal, self.phase = None, phase
            for p, g in zip(params, grads):
                p.grad = g
            for m, mode in modes:
                m.training = mode
            for m, name, b, saved in buffers:
                setattr(m, name, b)
                with adapter.no_grad():
                    b.copy_(adapter.from_numpy(saved))
            adapter.set_random_state(rng_state)

    # -- lifecycle (used by gl.watch and gradlog train) ------------------------------------
    def start(self) -> Run:
        """Set up every plugin, attach the framework's hooks and fire ``on_train_start``."""
        if self._state != "new":
            raise RuntimeError(f"this run was already started ({self._state})")
        self._state = "running"
        for slot in self._dispatcher.slots:
            slot.registrar = HookRegistrar(self, slot)
            if slot.generator is None:  # not already restored by load_state_dict
                slot.generator = adapter.new_generator(
                    (self.seed * 1_000_003 + zlib.crc32(slot.name.encode())) % (2 ** 63))
        set_up: list[Slot] = []
        try:
            self._attach_framework_hooks()
            for slot in self._dispatcher.slots:
                self._setup(slot)
                set_up.append(slot)
            self._dispatcher.fire("on_train_start")
        except BaseException as exc:
            # as finish(error): the plugins set up so far hear of it, nothing stays attached
            try:
                if isinstance(exc, Exception):
                    self._dispatcher.fire_exception(exc, set_up)
            finally:
                self._detach_all()
                self._state = "finished"
                self._close_writer()
            raise
        return self

    def _setup(self, slot: Slot) -> None:
        prev, self._active = self._active, slot
        try:
            slot.plugin.setup(run=self)
        except (PluginConfigError, OSError, *CONTROL_FLOW):
            raise
        except Exception as exc:  # noqa: BLE001
            if self.strict or slot.kind == "mutator":
                raise PluginError(slot.name, "setup", self.step, exc) from exc
            self._dispatcher.max_failures, saved = 1, self._dispatcher.max_failures
            try:
                self._dispatcher.failed(slot, "setup", exc)
            finally:
                self._dispatcher.max_failures = saved
        finally:
            self._active = prev

    def _attach_framework_hooks(self) -> None:
        keep = self._framework_handles.append
        if self.optimizer is not None:
            keep(self.optimizer.register_step_pre_hook(self._on_step_pre))
            keep(self.optimizer.register_step_post_hook(self._on_step_post))
        keep(adapter.on_backward_end(self._on_backward_end))
        if self._auto_batches:
            keep(self.model.register_forward_pre_hook(self._on_root_forward))

    def finish(self, error: BaseException | None = None) -> None:
        """End the run: ``on_train_end`` (or ``on_exception``), remove every hook, close the
        writer. Idempotent."""
        if self._state != "running":
            return
        self._state = "finishing"
        try:
            if error is None:
                try:
                    if self._in_batch:
                        self.end_batch()
                    self._dispatcher.fire("on_train_end")
                except Exception as exc:  # e.g. a mutator failing in on_train_end
                    self._dispatcher.fire_exception(exc)
                    raise
            else:
                self._dispatcher.fire_exception(error)
        finally:
            self._detach_all()
            self._state = "finished"
            self._close_writer()

    def _close_writer(self) -> None:
        if self.writer is not None:
            self.writer.flush()
            if self._owns_writer:
                self.writer.close()

    def _detach_all(self) -> None:
        for slot in self._dispatcher.slots:
            if slot.registrar is not None:
                slot.registrar.remove_all()
            if slot.enabled and self._state != "new":
                try:
                    slot.plugin.teardown(run=self)
                except Exception as exc:  # noqa: BLE001
                    self.report(f"plugin '{slot.name}' failed in teardown: {exc}")
        for h in self._framework_handles:
            h.remove()
        self._framework_handles.clear()

    def handles_left(self) -> int:
        """How many hooks the plugins and the framework still hold (0 after the run)."""
        return len(self._framework_handles) + sum(
            len(s.registrar) for s in self._dispatcher.slots if s.registrar is not None)

    # -- batches, epochs, validation -------------------------------------------------------
    def begin_batch(self, batch: Any) -> Any:
        """Start a training batch: ``on_batch_start``; returns the (possibly replaced)
        batch."""
        if self._in_batch:
            self.end_batch()
        self._in_batch, self._stepped = True, False
        self._replaced = {}
        return self._dispatcher.fire_chain("on_batch_start", "batch", batch)

    def end_batch(self, metrics: dict | None = None) -> None:
        """End the current batch: ``on_batch_end(metrics)``, telemetry, then the step moves
        on (if the optimizer stepped)."""
        if not self._in_batch:
            return
        merged = {**self._metrics, **(metrics or {})}
        self._metrics = {}
        self._dispatcher.fire("on_batch_end", metrics=merged)
        self._in_batch = False
        if self._stepped:
            self._steps_since_telemetry += 1
            if self._telemetry_every and (self.step + 1) % self._telemetry_every == 0:
                self._log_telemetry()
            self.step += 1
        self._stepped = False

    def batch(self, *batch: Any) -> Any:
        """Announce a training batch in your own loop: ``x, y = run.batch(x, y)``."""
        out = self.begin_batch(batch if len(batch) != 1 else batch[0])
        return out

    def epoch_start(self) -> None:
        self._dispatcher.fire("on_epoch_start")

    def epoch_end(self) -> None:
        """Announce the end of an epoch (``on_epoch_end``)."""
        if self._in_batch:
            self.end_batch()
        self._dispatcher.fire("on_epoch_end")
        if self._telemetry_every and self._steps_since_telemetry:  # a point per epoch end
            self._log_telemetry(max(self.step - 1, 0))
        self.epoch += 1

    def validation_end(self, metrics: dict, *, log: bool = True) -> None:
        """Announce validation results (``on_validation_end(metrics)``); numbers are logged."""
        if self._in_batch:
            self.end_batch()
        if log:
            for tag, value in metrics.items():
                if isinstance(value, (int, float)) or adapter.is_tensor(value):
                    self.log_scalar(tag, value)
            self._metrics = {}
        self._dispatcher.fire("on_validation_end", metrics=dict(metrics))

    # -- the framework's hooks ---------------------------------------------------------------
    def _on_root_forward(self, module: Any, args: tuple) -> Any:
        if (self._internal is not None or self.phase != "train" or not module.training
                or not adapter.is_grad_enabled()):
            return None
        if self._in_batch and not self._stepped:
            return None
        new = self.begin_batch(args if len(args) != 1 else args[0])
        if new is args or (len(args) == 1 and new is args[0]):
            return None
        return new if isinstance(new, tuple) else (new,)

    def _on_backward_end(self) -> None:
        if self._internal is None and self._in_batch and self.phase == "train":
            self._dispatcher.fire("on_after_backward")

    def _on_step_pre(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if self._internal is not None:
            return None
        if not self._in_batch:
            self._in_batch, self._stepped = True, False
        try:
            self._dispatcher.fire("on_before_optimizer_step")
        except SkipStep:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
            self.skipped_steps += 1
        return None

    def _on_step_post(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if self._internal is not None:
            return None
        self._dispatcher.fire("on_after_optimizer_step")
        self._stepped = True
        return None

    # -- reporting -------------------------------------------------------------------------
    def _note_replacement(self, slot: Slot, where: str) -> None:
        self._replaced[f"plugin '{slot.name}' ({where})"] = None

    def disabled_plugins(self) -> list[tuple[str, str]]:
        """``(name, why)`` of each plugin the failure policy disabled during the run."""
        return [(s.name, s.disabled_because) for s in self._dispatcher.slots
                if s.disabled_because is not None]

    def replaced_values(self) -> list[str]:
        """Which mutators replaced a value (batch, gradient, activation...) in the current
        batch: what to suspect when the step then fails outside any plugin."""
        return list(self._replaced)

    def _record_error(self, slot: Slot, where: str, message: str, tb: str) -> None:
        if self.writer is not None:
            self.writer.add_text("plugins/errors", f"{message}\n\n```\n{tb}\n```", self.step)

    def _log_telemetry(self, step: int | None = None) -> None:
        n = max(self._steps_since_telemetry, 1)
        for slot in self._dispatcher.slots:
            if self.writer is not None and slot.enabled:
                self.writer.add_scalar(f"plugins/{slot.name}/ms_per_step",
                                       slot.seconds * 1000.0 / n,
                                       self.step if step is None else step)
            slot.seconds = 0.0
        self._steps_since_telemetry = 0

    # -- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Step, epoch, and each plugin's state and generator (for checkpoints). A batch
        whose optimizer step is done is ended first, so the checkpoint is at a clean step."""
        if self._in_batch and self._stepped:
            self.end_batch()
        return {
            "step": self.step, "epoch": self.epoch, "skipped_steps": self.skipped_steps,
            "plugins": {s.name: s.plugin.state_dict() for s in self._dispatcher.slots},
            "generators": {s.name: adapter.to_numpy(s.generator.get_state()).copy()
                           for s in self._dispatcher.slots if s.generator is not None},
        }

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])
        self.epoch = int(state["epoch"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
        for s in self._dispatcher.slots:
            if s.name in state.get("plugins", {}):
                s.plugin.load_state_dict(state["plugins"][s.name])
            gen = state.get("generators", {}).get(s.name)
            if gen is not None:
                if s.generator is None:  # restored before start(), as gradlog train resumes
                    s.generator = adapter.new_generator(0)
                s.generator.set_state(gen)

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> Run:
        if self._state == "new":
            self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        from .errors import StopTraining
        if exc is None or isinstance(exc, StopTraining):
            self.finish()
            return exc is not None
        self.finish(error=exc)
        return False

    def close(self) -> None:
        """Finish the run (same as leaving the ``with`` block)."""
        self.finish()
