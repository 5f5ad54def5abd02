"""The ``Run``: one training run with plugins attached, as its users see it: the logging API
and the order of its life (start, finish, checkpoints), each job owned by one object. The
step, epoch, phase and batch state belong to its ``StepDriver`` (``steps.py``, ``run.driver``),
which fires the loop events; in ``gl.watch`` the ``WatchAdapter`` (``adapter.py``) drives it
from hooks; the plugins' set-up, tear-down and checkpoint state belong to ``PluginLifecycle``
(``lifecycle.py``). Each plugin sees the run through its own ``PluginRun`` (``view.py``); what
differs between engines is asked of ``run.engine``.

``run.step`` counts optimizer steps (those a loss scaler skipped included) and starts at 0:
everything about batch k is logged at step k; the counter moves to k + 1 when batch k ends.
Without an optimizer, each backward pass into the model's parameters is a step.

On several processes (``run.rank`` of ``run.world_size``), every rank runs the plugins and only
rank 0 writes the run; ``ranks.py`` says where reduced and per-rank values go.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..engines import engine_for
from .adapter import WatchAdapter
from .dispatch import Dispatcher, Replacements, Slot
from .errors import PluginConfigError
from .lifecycle import PluginLifecycle
from .passes import InternalPasses
from .policy import FailurePolicy, warn
from .ranks import RankedWriters, supports
from .registrar import HookRegistrar
from .steps import StepDriver

__all__ = ["Run"]


def _print(text: str, brief: str | None = None) -> None:
    print(text, flush=True)


class Run:
    """One training run with plugins attached. Create it with ``gl.watch(...)`` (your own
    loop) or let ``gradlog train`` create it.

    In your own loop, announce what the hooks cannot see: ``x, y = run.batch(x, y)`` (needed by
    plugins that use labels or replace inputs), ``run.epoch_end()``,
    ``run.validation_end(metrics)``; log with ``run.log_scalar(tag, value)``.
    Each plugin's ``plugins/<name>/ms_per_step`` is logged every ``telemetry_every`` steps and
    at each epoch end (``telemetry_every=0`` turns it off, as ``PluginHarness`` does), and with
    gradlog's writer ``plugins/<name>/queue_waits``: how often per step the plugin's calls
    waited for the writer's full background queue (both averaged since the previous point).
    The engine (``run.engine``) is chosen from the model's type unless given. A plugin's
    failure is said through ``report(message)`` (a ``RuntimeWarning`` unless given;
    ``gradlog train`` prints it as one of its own lines); a plugin's information for the person
    at the console (``run.say(text, brief)``, e.g. an end-of-run summary) goes to
    ``say(text, brief)`` (``text`` to standard output unless given; ``gradlog train``'s console,
    which under ``--quiet`` prints only ``brief``, a line on standard error, when there is one).
    ``hooks=False``: no hook of ``gl.watch`` is attached, the caller announces every boundary
    to ``run.driver`` (``gradlog train``'s loop, a framework's callbacks); ``scaler``: see
    ``gl.watch``.

    Data-parallel: ``model`` may be a ``DistributedDataParallel`` wrapper; ``run.model`` is the
    module it wraps (the names of a one-process run). The ranks are the engine's process group
    (``run.rank``, ``run.world_size``); rank 0 alone writes ``writer``, ``rank_writer(k)``
    makes rank k's ``rank<k>/`` sub-run writer (default: beside ``writer``'s directory), and
    every rank uses rank 0's ``seed``.
    """

    def __init__(self, model: Any, optimizer: Any = None, writer: Any = None, *,
                 plugins: Any = (), strict: bool = False, max_failures: int = 3,
                 probe_sets: dict | None = None, config: dict | None = None, seed: int = 0,
                 auto_batches: bool = True, telemetry_every: int = 50,
                 owns_writer: bool = True, engine: Any = None,
                 rank_writer: Callable[[int], Any] | None = None,
                 report: Callable[[str], None] | None = None, scaler: Any = None,
                 hooks: bool = True, say: Callable[[str, str | None], None] | None = None) -> None:
        self.engine = engine if engine is not None else engine_for(model)
        self.model = self.engine.local_module(model)
        self._given_model = model  # (a compiled or data-parallel wrapper: its root hook)
        self.optimizer = optimizer
        self.collectives = self.engine.collectives()
        self._ranks = RankedWriters(writer, self.collectives, rank_writer)
        if self.collectives.world_size > 1:  # mutators' generators must agree across ranks
            seed = int(self.collectives.broadcast(np.array([seed], dtype=np.int64))[0])
        self.probe_sets = dict(probe_sets or {})
        self.config = dict(config or {})
        self.seed = seed
        self.strict = strict
        self._owns_writer = owns_writer
        self._auto_batches = auto_batches
        self._telemetry_every = telemetry_every
        self._steps_since_telemetry = 0
        names = [p.name for p in plugins]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise PluginConfigError(f"plugin '{dupes[0]}' is enabled twice")
        self._passes = InternalPasses(self)
        self._replacements = Replacements()
        self._policy = FailurePolicy(strict=strict, max_failures=max_failures,
                                     record=self._record_error, report=report or warn,
                                     step=lambda: self.step)
        slots = [Slot(p, i) for i, p in enumerate(plugins)]
        self._dispatcher = Dispatcher(slots, self._policy, self._replacements,
                                      self.engine.is_tensor)
        self._lifecycle = PluginLifecycle(self._dispatcher, self._policy, self._passes,
                                          self._replacements, self.engine, seed)
        self.driver = StepDriver(self._dispatcher, self._step_done, self._log_amp_skipped)
        self._adapter = WatchAdapter(self.driver, self.engine, model, optimizer,
                                     passes=self._passes, scaler=scaler,
                                     auto_batches=auto_batches)
        self._watch_hooks = hooks
        self.say = say or _print
        self._framework_handles: list = []
        self._state = "new"

    # -- the driver's state, as users and plugins read it ----------------------------------
    @property
    def step(self) -> int:
        """Optimizer steps done (see the module docstring)."""
        return self.driver.step

    @property
    def epoch(self) -> int:
        return self.driver.epoch

    @property
    def phase(self) -> str:
        """``"train"``, ``"validation"`` (inside ``run.validating()``) or an internal pass's
        kind: set by those contexts only."""
        return self.driver.phase

    @property
    def loss_scale(self) -> float:
        """The loss scale of ``gl.watch(..., scaler=)`` (1.0 without one): what a hook that
        reads ``.grad`` during backward (before the scaler unscales it) divides by."""
        return self._adapter.loss_scale()

    @property
    def micro_batch(self) -> int:
        """Which batch of the current step this is (0: the first; more with gradient
        accumulation announced batch by batch with ``run.batch``)."""
        return self.driver.micro_batch

    @property
    def skipped_steps(self) -> int:
        """Steps a plugin skipped (``SkipStep``, e.g. nan-guard)."""
        return self.driver.skipped_steps

    @property
    def amp_skipped_steps(self) -> int:
        """Steps the loss scaler (``gl.watch(..., scaler=)``) skipped: inf or NaN gradients."""
        return self.driver.amp_skipped_steps

    def validating(self) -> Any:
        """``with run.validating():`` -- the model's passes inside are validation (plugins'
        hooks do not log them and they start no training batch)."""
        return self.driver.in_phase("validation")

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
        """Plugins only: each plugin's ``run.hooks`` is its own registrar."""
        raise self._plugins_only("run.hooks")

    @property
    def rng(self) -> Any:
        """Plugins only: each plugin's ``run.rng`` is its own seeded generator."""
        raise self._plugins_only("run.rng")

    def internal_pass(self, kind: str) -> Any:
        """Plugins only: a plugin's own forward/backward passes (probes, attacks) inside
        ``with run.internal_pass(kind):`` are invisible to other plugins; the model's
        train/eval modes, its buffers, the parameters' ``.grad`` and the global random state
        are restored afterwards, and the global random functions draw from the plugin's own
        generator."""
        raise self._plugins_only("run.internal_pass")

    @staticmethod
    def _plugins_only(what: str) -> RuntimeError:
        return RuntimeError(f"{what} is available to plugins only, through the run passed to "
                            "their setup, events and hooks")

    @property
    def writer(self) -> Any:
        """The run's writer: rank 0's (None on the other ranks, which write nothing of the run
        itself)."""
        return self._ranks.main

    @writer.setter
    def writer(self, writer: Any) -> None:
        self._ranks.set_main(writer)

    @property
    def rank(self) -> int:
        """This process's rank (0 in a one-process run)."""
        return self.collectives.rank

    @property
    def world_size(self) -> int:
        """How many processes train the model together (1 in a one-process run)."""
        return self.collectives.world_size

    def log_scalar(self, tag: str, value: Any, step: int | None = None, *,
                   reduce: str | None = None, per_rank: bool = False,
                   metric: bool = True) -> float:
        """Log a scalar at ``step`` (default: the current step). Values logged from your own
        loop (``metric=True``) also reach the plugins' ``on_batch_end(metrics)``; a plugin's
        own scalars do not.

        On several ranks, rank 0's value is logged, unless ``reduce`` (``"mean"``, ``"sum"``,
        ``"max"``, ``"min"``) asks for the reduction over every rank's value (then every rank
        must log the tag at the same point); ``per_rank=True`` writes this rank's value into
        its ``rank<k>/`` sub-run instead. Returns the value logged (the reduction, with
        ``reduce``)."""
        v = self._ranks.reduce(self._one_number(tag, value), reduce)
        if metric:
            self.driver.metrics[tag] = v
        writer = self._ranks.target(per_rank)
        if writer is not None:
            writer.add_scalar(tag, v, self.step if step is None else step)
        return v

    def _one_number(self, tag: str, value: Any) -> float:
        """``value`` as a float: a number, or an array or tensor of one element (any shape,
        as ``SummaryWriter.add_scalar`` takes it)."""
        array = np.asarray(self.engine.to_numpy(value))
        if array.size != 1:
            raise ValueError(f"log_scalar('{tag}') takes one value, got an array of shape "
                             f"{tuple(array.shape)}")
        return float(array.reshape(()))

    def _log_amp_skipped(self, count: int) -> None:
        self.log_scalar("amp/skipped_steps", count, metric=False)

    def _step_done(self) -> None:
        """The step is moving on: telemetry every ``telemetry_every`` steps."""
        self._steps_since_telemetry += 1
        if self._telemetry_every and (self.driver.step + 1) % self._telemetry_every == 0:
            self._log_telemetry()

    def log_histogram(self, tag: str, values: Any, step: int | None = None,
                      bins: Any = "tensorflow", *, also_tags: tuple[str, ...] = (),
                      copy: bool = True, per_rank: bool = False) -> None:
        """Log a histogram at ``step`` (default: the current step), and the same one under
        each of ``also_tags`` (computed once by gradlog's writer; by another writer, once per
        tag). ``copy=False``: ``values`` is an array the caller made for this call and never
        changes, which gradlog's writer then reads without copying it. ``per_rank=True``
        writes this rank's histogram into its ``rank<k>/`` sub-run."""
        self.log_histograms({tag: values}, step, bins, also_tags={tag: also_tags},
                            copy=copy, per_rank=per_rank)

    def log_histograms(self, tag_values: dict, step: int | None = None,
                       bins: Any = "tensorflow", *, also_tags: dict | None = None,
                       copy: bool = True, per_rank: bool = False) -> None:
        """Log several histograms (``{tag: values}``) at ``step``, as :meth:`log_histogram`
        does each (``also_tags`` maps a tag to its extra tags). gradlog's writer writes them
        as one event, queued as one call for its background thread (a logging step then
        waits less for it); another writer gets a call per tag."""
        writer = self._ranks.target(per_rank)
        if writer is None or not tag_values:
            return
        step = self.step if step is None else step
        extra = {t: tuple(more) for t, more in (also_tags or {}).items() if more}
        if supports(writer, "add_histogram_counts") and all(map(self.engine.is_tensor,
                                                               tag_values.values())):
            # counted by the engine where the tensors live; the writer gets the counts
            counts = self.engine.histogram_counts(list(tag_values.values()), bins)
            writer.add_histogram_counts([(tag, *extra.get(tag, ())) for tag in tag_values],
                                        counts, step)
            return
        arrays = {tag: self.engine.to_numpy(v) for tag, v in tag_values.items()}
        if supports(writer, "add_histograms"):
            writer.add_histograms(arrays, step, bins=bins, also_tags=extra, copy=copy)
            return
        for tag, array in arrays.items():
            for each in (tag, *extra.get(tag, ())):
                writer.add_histogram(each, array, step, bins=bins)

    def take_histograms(self, tag_values: dict, bins: Any = "tensorflow", *,
                        per_rank: bool = False) -> Taken:
        """Take what histograms of ``{tag: tensor}`` need now (the tensors may change right
        after), to log later with :meth:`log_taken`: for gradlog's writer the engine's counts,
        computed where the tensors live (nothing full-sized crosses to the host); for another
        writer, which takes values, copies of the values. ``per_rank``: also for this rank's
        sub-run (what is taken serves both)."""
        writers = [w for w in {self._ranks.target(False), self._ranks.target(per_rank)}
                   if w is not None]
        tags = list(tag_values)
        if not writers or not tags:
            return Taken(tags, None, None)
        values = list(tag_values.values())
        if all(supports(w, "add_histogram_counts") for w in writers) and \
                all(map(self.engine.is_tensor, values)):
            return Taken(tags, self.engine.histogram_counts(values, bins), None)
        return Taken(tags, None, ([np.array(self.engine.to_numpy(v)) for v in values], bins))

    def log_taken(self, taken: Taken, step: int | None = None, *,
                  also_tags: dict | None = None, per_rank: bool = False) -> None:
        """Log histograms taken by :meth:`take_histograms` (``also_tags`` as in
        :meth:`log_histograms`), as one event."""
        writer = self._ranks.target(per_rank)
        if writer is None or not taken.tags:
            return
        step = self.step if step is None else step
        extra = also_tags or {}
        if taken.counts is not None:
            writer.add_histogram_counts([(t, *extra.get(t, ())) for t in taken.tags],
                                        taken.counts, step)
        elif taken.copies is not None:
            arrays, bins = taken.copies
            self.log_histograms(dict(zip(taken.tags, arrays)), step, bins, also_tags=extra,
                                copy=False, per_rank=per_rank)

    def log_scalar_from(self, tag: str, function: Callable[..., Any], values: tuple,
                        step: int | None = None) -> None:
        """Log the number ``function(*arrays)`` of ``values`` (tensors or arrays, as numpy
        arrays; None logs nothing) at ``step``: gradlog's writer computes it on its background
        thread from copies, another writer at once. Not one of the loop's metrics (on several
        ranks, rank 0's)."""
        self.log_scalars_from((tag,), lambda *arrays: (function(*arrays),), values, step)

    def log_scalars_from(self, tags: Any, function: Callable[..., Any], values: tuple,
                         step: int | None = None) -> None:
        """As :meth:`log_scalar_from`, for ``function`` returning one number (or None) per tag
        of ``tags``: gradlog's writer writes them as one event, one call for its thread."""
        writer = self.writer
        if writer is None:
            return
        arrays = tuple(self.engine.to_numpy(v) for v in values)
        step = self.step if step is None else step
        if supports(writer, "add_scalars_from"):
            writer.add_scalars_from(tags, function, arrays, step)
            return
        from ..tensorboard.writer import computed_scalars
        for tag, value in computed_scalars(tags, function, arrays, "log_scalars_from"):
            writer.add_scalar(tag, value, step)

    def log_image(self, tag: str, image: Any, step: int | None = None,
                  dataformats: str = "CHW", *, per_rank: bool = False) -> None:
        writer = self._ranks.target(per_rank)
        if writer is not None:
            writer.add_image(tag, self.engine.to_numpy(image),
                             self.step if step is None else step, dataformats=dataformats)

    def log_text(self, tag: str, text: str, step: int | None = None, *,
                 per_rank: bool = False) -> None:
        writer = self._ranks.target(per_rank)
        if writer is not None:
            writer.add_text(tag, text, self.step if step is None else step)

    # -- lifecycle (used by gl.watch and gradlog train) ------------------------------------
    def start(self) -> Run:
        """Set up every plugin, attach the framework's hooks and fire ``on_train_start``."""
        if self._state != "new":
            raise RuntimeError(f"this run was already started ({self._state})")
        self._state = "running"
        self._lifecycle.prepare(self, self.model, self.optimizer)
        try:
            self._attach_framework_hooks()
            self._lifecycle.set_up()
            self._dispatcher.fire("on_train_start")
        except BaseException as exc:
            # as finish(error): the plugins set up so far hear of it, nothing stays attached
            try:
                if isinstance(exc, Exception):
                    self._dispatcher.fire_exception(exc, self._lifecycle.set_up_slots)
            finally:
                self._detach_all()
                self._state = "finished"
                self._close_writer()
            raise
        return self

    def _attach_framework_hooks(self) -> None:
        if not self._watch_hooks:  # the caller announces every boundary to run.driver
            return
        if self.optimizer is None:
            self._warn_no_optimizer()
        self._framework_handles.extend(self._adapter.attach())

    def _warn_no_optimizer(self) -> None:
        unused = [s.name for s in self._dispatcher.slots
                  if {"on_before_optimizer_step", "on_after_optimizer_step"} & set(s.methods)]
        message = ("gl.watch without an optimizer: each backward pass into the model's "
                   "parameters counts as a step; on_before_optimizer_step and "
                   "on_after_optimizer_step never fire")
        if unused:
            message += f" (plugins that use them: {', '.join(unused)})"
        warnings.warn(message + "; pass the optimizer to gl.watch(model, optimizer) for "
                      "optimizer steps", UserWarning, stacklevel=5)  # gl.watch's caller

    def finish(self, error: BaseException | None = None) -> None:
        """End the run: ``on_train_end`` (or ``on_exception``), remove every hook, close the
        writer. Idempotent."""
        if self._state != "running":
            return
        self._state = "finishing"
        try:
            if error is None:
                try:
                    self._adapter.found_skipped()
                    self.driver.batch_end()
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
        self._ranks.close_own()
        if self.writer is not None:
            self.writer.flush()
            if self._owns_writer:
                self.writer.close()

    def _detach_all(self) -> None:
        self._lifecycle.tear_down(started=self._state != "new")
        for h in self._framework_handles:
            h.remove()
        self._framework_handles.clear()

    def handles_left(self) -> int:
        """How many hooks the plugins and the framework still hold (0 after the run)."""
        return len(self._framework_handles) + self._lifecycle.handles_left()

    # -- batches, epochs, validation (the driver's, as announced by a loop) -----------------
    def begin_batch(self, batch: Any) -> Any:
        """Start a training batch: ``on_batch_start``; returns the (possibly replaced)
        batch."""
        return self._adapter.batch_start(batch)

    def end_batch(self, metrics: dict | None = None) -> None:
        """End the current batch: ``on_batch_end(metrics)``, telemetry, then the step moves
        on (if the optimizer stepped)."""
        self.driver.batch_end(metrics)

    def batch(self, *batch: Any) -> Any:
        """Announce a training batch in your own loop and get it back, possibly replaced by a
        mutator: ``x, y = run.batch(x, y)``, or one batch of any structure (a dict, tuple,
        list or dataclass): ``model(**run.batch(batch))``."""
        return self.begin_batch(batch if len(batch) != 1 else batch[0])

    def epoch_start(self) -> None:
        self.driver.epoch_start()

    def epoch_end(self) -> None:
        """Announce the end of an epoch (``on_epoch_end``)."""
        try:
            self.driver.epoch_end()
        finally:
            if self._telemetry_every and self._steps_since_telemetry:  # a point per epoch
                self._log_telemetry(max(self.step - 1, 0))

    def validation_end(self, metrics: dict, *, log: bool = True) -> None:
        """Announce validation results (``on_validation_end(metrics)``); numbers are logged."""
        self.driver.batch_end()
        if log:
            for tag, value in metrics.items():
                if isinstance(value, (int, float)) or self.engine.is_tensor(value):
                    self.log_scalar(tag, value)
            self.driver.metrics = {}
        self.driver.validation_end(metrics)

    # -- reporting -------------------------------------------------------------------------
    def disabled_plugins(self) -> list[tuple[str, str]]:
        """``(name, why)`` of each plugin the failure policy disabled during the run."""
        return self._lifecycle.disabled()

    def replaced_values(self) -> list[str]:
        """Which mutators replaced a value (batch, gradient, activation...) in the current
        batch: what to suspect when the step then fails outside any plugin."""
        return list(self._replacements)

    def _record_error(self, slot: Slot, where: str, message: str, tb: str) -> None:
        writer = self._ranks.errors()
        if writer is not None:
            writer.add_text("plugins/errors", f"{message}\n\n```\n{tb}\n```", self.step)

    def _log_telemetry(self, step: int | None = None) -> None:
        n = max(self._steps_since_telemetry, 1)
        step = self.step if step is None else step
        writer = self.writer
        queued = supports(writer, "queue_waits")  # (gradlog's writer; 0 without its thread)
        for slot in self._dispatcher.slots:
            if writer is not None and slot.enabled:
                writer.add_scalar(f"plugins/{slot.name}/ms_per_step",
                                  slot.seconds * 1000.0 / n, step)
                if queued:
                    writer.add_scalar(f"plugins/{slot.name}/queue_waits",
                                      slot.queue_waits / n, step)
            slot.seconds, slot.queue_waits = 0.0, 0
        self._steps_since_telemetry = 0

    # -- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Step, epoch, and each plugin's state and generator (for checkpoints). A batch
        whose optimizer step is done is ended first, so the checkpoint is at a clean step."""
        self._adapter.found_skipped()
        self.driver.settle()
        return {
            "step": self.step, "epoch": self.epoch, "skipped_steps": self.skipped_steps,
            "amp_skipped_steps": self.amp_skipped_steps, **self._lifecycle.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.driver.jump_to(int(state["step"]), int(state["epoch"]))
        self.driver.skipped_steps = int(state.get("skipped_steps", 0))
        self.driver.amp_skipped_steps = int(state.get("amp_skipped_steps", 0))
        self._lifecycle.load_state_dict(state)

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


class Taken(NamedTuple):
    """Histograms taken at one moment, to log later (see ``Run.take_histograms``): the
    engine's pending counts, or copies of the values for a writer that takes values."""

    tags: list
    counts: Any
    copies: Any

    @staticmethod
    def merged(takens: list) -> Taken:
        """Several takens of the same kind as one (one event)."""
        tags = [t for k in takens for t in k.tags]
        if any(k.counts is not None for k in takens):
            parts = [k.counts for k in takens if k.counts is not None]
            return Taken(tags, functools.cache(lambda: [c for f in parts for c in f()]), None)
        copies = [k.copies for k in takens if k.copies is not None]
        if not copies:
            return Taken(tags, None, None)
        return Taken(tags, None, ([a for arrays, _ in copies for a in arrays], copies[0][1]))
