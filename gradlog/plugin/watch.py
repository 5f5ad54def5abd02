"""``gl.watch``: plugins inside your own training loop."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..engines import engine_for
from .discovery import discover, load, resolve_plugins
from .model_text import MODEL_TEXT_TAG, model_text
from .options import load_config, parse_spec
from .ranks import rank_writers
from .run import Run
from .writers import open_writer

__all__ = ["watch", "watch_driven", "WatchSettings"]


def watch(model: Any, optimizer: Any = None, *, logdir: str | None = None, plugins: Any = (),
          strict: bool = False, config: Any = None, probe_sets: dict | None = None,
          max_failures: int = 3, writer: Any = None, scaler: Any = None,
          graph: bool = True) -> Run:
    """Attach plugins to ``model`` and ``optimizer`` and log to TensorBoard in ``logdir``.

    ``model`` is a ``gradlog.nn.Module`` or a ``torch.nn.Module`` (with a
    ``torch.optim.Optimizer``): the engine is chosen from its type. Without an optimizer, each
    backward pass into the model's parameters counts as a step (with a warning).

    Data-parallel (``DistributedDataParallel`` of either engine, every rank calling
    ``gl.watch``): rank 0 creates the run directory (``logdir``, or the default one it names)
    and alone writes the run; per-rank values go to ``<logdir>/rank<k>/``.

    Args:
        plugins: ``-p``-style strings (``"grad-clip:max_norm=1.0"``), plugin classes or
            instances, in enabling order.
        strict: make every plugin error fatal (for tests and CI).
        config: a dict or a TOML file path; its ``[plugins.NAME]`` tables enable plugins.
        probe_sets: data for plugins that probe the model (e.g. Grad-CAM's fixed images).
        writer: an existing writer (default: a new ``SummaryWriter(logdir)``).
        scaler: the loop's ``torch.amp.GradScaler``, so that a step it skips (inf or NaN
            gradients) is counted and logged as ``amp/skipped_steps`` (gradients are read
            unscaled with or without it: at the optimizer's step, after ``unscale_``).
        graph: log the model's graph once, for TensorBoard's Graphs tab (the ``graph``
            plugin, enabled first; a model that cannot be traced gets one warning line).
            Only where the writer has ``add_graph``.

    The run starts with the text ``model``: the model's repr and its parameters (what the
    dashboard orders its layers by). Returns the started ``Run``; use it as a context manager
    (leaving the block removes every hook and closes the writer) or call ``run.close()``. The
    optimizer's step hooks (gradients are final just before it applies them; closures
    included) and the model's forward calls drive the plugins' events (``adapter.py``); call
    ``run.batch(x, y)``, ``run.epoch_end()`` and ``run.validation_end(metrics)`` for what the
    hooks cannot see.
    """
    return _start(model, optimizer, logdir=logdir, plugins=plugins, strict=strict,
                  config=config, probe_sets=probe_sets, max_failures=max_failures,
                  writer=writer, scaler=scaler, hooks=True, state=None, shares_dir=False,
                  graph=graph)


def watch_driven(model: Any, optimizer: Any, *, logdir: str | None = None, plugins: Any = (),
                 strict: bool = False, config: Any = None, probe_sets: dict | None = None,
                 max_failures: int = 3, state: dict | None = None,
                 every: int | None = None) -> Run:
    """``gl.watch`` for a training framework whose own callbacks say where the steps are
    (``gradlog.integrations``): no hook of ``gl.watch`` is attached to ``model`` or
    ``optimizer``; the caller announces each boundary to ``run.driver``
    (``batch_start(batch)``, ``gradients_final(optimizer)`` where the framework's gradients
    are final, ``step_end()``, ``batch_end(metrics)``, ``validation_end(metrics)``,
    ``epoch_end()``) and ends the run with ``run.finish(error=None)``. Plugins still attach
    their own hooks (activations, weights) through the run.

    ``logdir`` may already hold the framework's own event files (its TensorBoard logger's
    directory): gradlog's files go beside them, so one TensorBoard run shows both. ``state``
    is ``run.state_dict()`` of the run this one continues (kept in the framework's
    checkpoint): step, epoch and the plugins' state are restored before the plugins start,
    and the run's writer purges the steps from there on that ``logdir`` already holds (an
    earlier session's, logged after the checkpoint: TensorBoard shows each step once).
    ``every``: the ``every`` option (how often it logs) of each plugin enabled by name that has
    one and was not given one (in its ``-p`` string or ``config``). The other arguments are
    ``gl.watch``'s; data-parallel ranks as there (rank 0 writes).
    """
    cfg = load_config(config) if isinstance(config, str) else dict(config or {})
    if every is not None:
        cfg = _with_every(plugins, cfg, every)
    return _start(model, optimizer, logdir=logdir, plugins=plugins, strict=strict,
                  config=cfg, probe_sets=probe_sets, max_failures=max_failures,
                  writer=None, scaler=None, hooks=False, state=state, shares_dir=True,
                  graph=False)  # a framework logs its graph itself (Lightning: log_graph)


@dataclasses.dataclass
class WatchSettings:
    """What a framework's callback was asked to watch (``gradlog.integrations``): its
    ``plugins``, ``logdir``, ``every``, ``strict``, ``config`` and ``max_failures``, as
    ``watch_driven`` takes them; ``start`` begins a run with them."""

    plugins: list
    logdir: str | None = None
    every: int | None = 100
    strict: bool = False
    config: Any = None
    max_failures: int = 3

    def __post_init__(self) -> None:
        self.plugins = list(self.plugins)

    def start(self, model: Any, optimizer: Any, *, logdir: str | None,
              state: dict | None = None) -> Run:
        """``watch_driven`` with these settings, writing into ``logdir``."""
        return watch_driven(model, optimizer, logdir=logdir, plugins=self.plugins,
                            strict=self.strict, config=self.config,
                            max_failures=self.max_failures, state=state, every=self.every)


def _start(model: Any, optimizer: Any, *, logdir: str | None, plugins: Any, strict: bool,
           config: Any, probe_sets: dict | None, max_failures: int, writer: Any, scaler: Any,
           hooks: bool, state: dict | None, shares_dir: bool, graph: bool) -> Run:
    """The run of ``watch`` and ``watch_driven``, started (its writer closed if it fails)."""
    engine = engine_for(model)
    optimizer = engine.local_optimizer(optimizer) if optimizer is not None else None
    cfg = load_config(config) if isinstance(config, str) else dict(config or {})
    # the graph plugin by default, where the writer can log graphs (gradlog.testing's
    # MemoryWriter cannot)
    graphs = graph and (writer is None or callable(getattr(writer, "add_graph", None)))
    enabled = resolve_plugins(plugins, config=cfg, defaults=("graph",) if graphs else ())
    ranks = engine.collectives()
    owns = writer is None
    logdir = _new_run_dir(logdir, ranks, given_writer=not owns, shares_dir=shares_dir)
    # a continued run purges, at its step, what its directory holds from there on (the steps
    # an earlier session logged after the checkpoint, logged again now)
    purge_step = state.get("step") if state is not None else None
    if writer is None and ranks.rank == 0:
        writer = open_writer(logdir, purge_step=purge_step)
    if writer is not None and callable(getattr(writer, "get_logdir", None)):
        logdir = writer.get_logdir()
    if ranks.world_size > 1:  # rank 0 names the directory (the default one has a timestamp)
        logdir = ranks.broadcast_text(logdir or "") or None

    run = Run(model, optimizer, writer, plugins=enabled, strict=strict,
              max_failures=max_failures, probe_sets=probe_sets, config=cfg,
              seed=engine.initial_seed(), owns_writer=owns, engine=engine,
              rank_writer=rank_writers(logdir, purge_step=purge_step) if logdir else None,
              scaler=scaler,
              hooks=hooks)
    try:
        if state is not None:
            run.load_state_dict(state)
        run.start()
    except BaseException:
        if owns and writer is not None:
            writer.close()
        raise
    run.log_text(MODEL_TEXT_TAG, model_text(run.model), run.step)
    return run


def _with_every(specs: Any, cfg: dict, every: int) -> dict:
    """``cfg`` whose ``[plugins.NAME]`` tables give ``every`` to each plugin of ``specs`` named
    by a string whose options have ``every`` and that neither the string nor ``cfg`` sets."""
    tables = {name: dict(table) for name, table in cfg.get("plugins", {}).items()}
    available = None
    for spec in specs:
        if not isinstance(spec, str):
            continue
        name, options = parse_spec(spec)
        if "every" in options or "every" in tables.get(name, {}):
            continue
        available = discover() if available is None else available
        fields = getattr(load(name, available), "Options", None)
        if fields is not None and "every" in {f.name for f in dataclasses.fields(fields)}:
            tables.setdefault(name, {})["every"] = every
    return {**cfg, "plugins": tables}


def _new_run_dir(logdir: str | None, ranks: Any, *, given_writer: bool,
                 shares_dir: bool = False) -> str | None:
    """The directory of a new run: ``logdir``, refused if it already holds a run (as
    ``gradlog train`` refuses it; not when the run ``shares_dir`` with a framework's own
    logger), or a new default one (``runs/<time>_<host>``, or the next
    free ``-1``, ``-2``... name); decided by rank 0 (nothing to decide if it was given a
    writer), raised on every rank."""
    from . import run_dirs  # (lazily: import gradlog loads no TensorBoard)
    refusal = ""
    if ranks.rank == 0 and not given_writer:
        if not logdir:
            logdir = run_dirs.claim_new_dir(run_dirs.default_run_dir())
        elif not shares_dir and run_dirs.holds_run(logdir):
            refusal = (f"{logdir} already holds a run (event files): a second gl.watch there "
                       "would log its steps again from 0 after the first run's; give another "
                       "logdir (or none, for a new default one), or pass your own "
                       f"writer=SummaryWriter({logdir!r}) to add to that run yourself")
    if ranks.world_size > 1:
        refusal = ranks.broadcast_text(refusal)
    if refusal:
        raise FileExistsError(refusal)
    return logdir
