"""A plugin's own view of the run: what ``setup``, every event and every hook of one plugin
receive as ``run``.

It reads the run's shared state (model, optimizer, engine, step, phase, probe sets, ...) and
carries what belongs to this plugin alone: its hook registrar (``hooks``), its generator
(``rng``), its internal passes, and log methods whose values are not the user's metrics. A
closure or a thread that keeps ``run.hooks`` keeps this plugin's registrar, whatever runs
later.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .ranks import supports
from .registrar import HookRegistrar

__all__ = ["PluginRun"]


class PluginRun:
    """``run`` as one plugin sees it (see the module docstring)."""

    def __init__(self, run: Any, slot: Any, passes: Any) -> None:
        self._run = run
        self._slot = slot
        self._passes = passes

    def __repr__(self) -> str:
        return f"<run as plugin '{self._slot.name}' sees it, step {self._run.step}>"

    # -- this plugin's own ----------------------------------------------------------------------
    @property
    def hooks(self) -> HookRegistrar:
        """This plugin's scoped hook registrar; its hooks are removed when the run ends or the
        plugin is disabled."""
        return self._slot.registrar

    @property
    def rng(self) -> Any:
        """This plugin's own seeded generator (never the global stream); inside its internal
        pass, the generator object that carries that stream."""
        return self._slot.rng

    def internal_pass(self, kind: str) -> Any:
        """A context manager for this plugin's own forward/backward passes (see
        ``Run.internal_pass``)."""
        return self._passes.enter(self._slot, kind)

    def log_scalar(self, tag: str, value: Any, step: int | None = None, *,
                   reduce: str | None = None, per_rank: bool = False) -> None:
        """See ``Run.log_scalar``: ``reduce`` (every rank calls it) or ``per_rank``."""
        self._charged(self._run.log_scalar, tag, value, step, reduce=reduce, per_rank=per_rank,
                      metric=False)

    def log_scalar_from(self, tag: str, function: Any, values: tuple,
                        step: int | None = None) -> None:
        self._charged(self._run.log_scalar_from, tag, function, values, step)

    def log_scalars_from(self, tags: Any, function: Any, values: tuple,
                         step: int | None = None) -> None:
        """See ``Run.log_scalars_from``: several computed numbers as one event."""
        self._charged(self._run.log_scalars_from, tags, function, values, step)

    def log_histogram(self, tag: str, values: Any, step: int | None = None,
                      bins: Any = "tensorflow", *, also_tags: tuple[str, ...] = (),
                      copy: bool = True, per_rank: bool = False) -> None:
        self._charged(self._run.log_histogram, tag, values, step, bins=bins,
                      also_tags=also_tags, copy=copy, per_rank=per_rank)

    def log_histograms(self, tag_values: dict, step: int | None = None,
                       bins: Any = "tensorflow", *, also_tags: dict | None = None,
                       copy: bool = True, per_rank: bool = False) -> None:
        """See ``Run.log_histograms``: several histograms as one event."""
        self._charged(self._run.log_histograms, tag_values, step, bins=bins,
                      also_tags=also_tags, copy=copy, per_rank=per_rank)

    def take_histograms(self, tag_values: dict, bins: Any = "tensorflow", *,
                        per_rank: bool = False) -> Any:
        """See ``Run.take_histograms``: what histograms need now, to log later."""
        return self._charged(self._run.take_histograms, tag_values, bins, per_rank=per_rank)

    def log_taken(self, taken: Any, step: int | None = None, *, also_tags: dict | None = None,
                  per_rank: bool = False) -> None:
        """See ``Run.log_taken``."""
        self._charged(self._run.log_taken, taken, step, also_tags=also_tags, per_rank=per_rank)

    def log_image(self, tag: str, image: Any, step: int | None = None,
                  dataformats: str = "CHW", *, per_rank: bool = False) -> None:
        self._charged(self._run.log_image, tag, image, step, dataformats=dataformats,
                      per_rank=per_rank)

    def log_text(self, tag: str, text: str, step: int | None = None, *,
                 per_rank: bool = False) -> None:
        self._charged(self._run.log_text, tag, text, step, per_rank=per_rank)

    def say(self, text: str, brief: str | None = None) -> None:
        """Information for the person at the console (one line or a few, e.g. a summary at the
        end of the run): ``gradlog train``'s console, standard output under ``gl.watch``.
        ``brief``: the one line that matters even to a user who asked for quiet, printed
        instead of ``text`` on standard error under ``gradlog train --quiet`` (None: nothing
        then). Rank 0's only."""
        if self._run.rank == 0:
            self._run.say(text, brief)

    def _charged(self, log: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``log(*args, **kwargs)``, the waits for the run's writer's full background queue
        during it charged to this plugin (``plugins/<name>/queue_waits``): counted where a
        plugin logs, not around each of its calls, which would cost every event."""
        writer = self._run.writer
        if not supports(writer, "queue_waits"):
            return log(*args, **kwargs)
        waits = writer.queue_waits
        try:
            return log(*args, **kwargs)
        finally:
            self._slot.queue_waits += writer.queue_waits - waits

    # -- the run's shared state -----------------------------------------------------------------
    @property
    def model(self) -> Any:
        return self._run.model

    @property
    def optimizer(self) -> Any:
        return self._run.optimizer

    @property
    def engine(self) -> Any:
        """The run's engine (``to_numpy``, ``no_grad``, ``grad``, ``functional``, ...)."""
        return self._run.engine

    @property
    def writer(self) -> Any:
        return self._run.writer

    @property
    def step(self) -> int:
        return self._run.step

    @property
    def micro_batch(self) -> int:
        """Which batch of the current step this is (0: the first; more with gradient
        accumulation announced batch by batch)."""
        return self._run.driver.micro_batch

    @property
    def amp_skipped_steps(self) -> int:
        return self._run.amp_skipped_steps

    @property
    def loss_scale(self) -> float:
        """See ``Run.loss_scale``: for hooks that read gradients during backward."""
        return self._run.loss_scale

    @property
    def rank(self) -> int:
        return self._run.rank

    @property
    def world_size(self) -> int:
        return self._run.world_size

    @property
    def epoch(self) -> int:
        return self._run.epoch

    @property
    def phase(self) -> str:
        return self._run.phase

    @property
    def probe_sets(self) -> dict:
        return self._run.probe_sets

    @property
    def config(self) -> dict:
        return self._run.config

    @property
    def seed(self) -> int:
        return self._run.seed

    @property
    def strict(self) -> bool:
        return self._run.strict

    @property
    def skipped_steps(self) -> int:
        return self._run.skipped_steps

    @property
    def plugins(self) -> list:
        return self._run.plugins

    def plugin(self, name: str) -> Any:
        return self._run.plugin(name)

    def handles_left(self) -> int:
        return self._run.handles_left()
