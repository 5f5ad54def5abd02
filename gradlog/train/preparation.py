"""A ``gradlog train`` command checked before anything is written: its configuration (a new
run's, or a resumed run's reconciled with what was given again), its run directory, the
example built, the engine chosen from the model, and (one rank of a job) the rank's share.
What one process trains from, and what ``--nproc`` checks before it starts the ranks.

Raises ``UserError``, ``PluginConfigError`` or ``PluginLoadError`` for a command that cannot
run, ``AlreadyFinished`` for a resumed run with nothing left to do; reads the run directory
and the example, writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import storage
from ..engines import Engine, engine_for, seed_loaded_engines
from . import checkpoints, parallel, runs
from .built import Built
from .config import RunConfig, TrainOptions, make_plugins, read_given, reconcile, resolve
from .console import Console
from .errors import AlreadyFinished, UserError
from .example import build, canonical, example_digest, load_example
from .logged import session_left_open

__all__ = ["Prepared", "prepare", "refuse_taken"]


@dataclass
class Prepared:
    """What a checked command trains."""

    config: RunConfig
    plugins: list
    run_dir: str  # a default one is only a name until the run claims it (or the next free)
    default_dir: bool  # no --logdir: a directory named by the time
    point: checkpoints.ResumePoint | None  # what --resume continues
    built: Built  # its training loader resumable (and a rank's share, in a job)
    loader_as_built: Any  # the loader build() returned: the model summary's example
    engine: Engine
    model: Any  # what trains: the model, or its parallel wrapper


def prepare(options: TrainOptions, console: Console,
            job: parallel.Job | None = None) -> Prepared:
    """Check ``options``, build the example and choose the engine (see the module)."""
    writes = job is None or job.rank == 0  # rank 0 alone writes the run directory
    given = read_given(options)
    if options.resume:
        config, plugins, point, module = _resumed(options, given, console)
        run_dir, default_dir = options.resume, False
    else:
        config, plugins, module = _new(given)
        point, default_dir = None, not options.logdir
        run_dir = options.logdir or runs.default_run_dir()
        if writes and not default_dir:
            refuse_taken(run_dir)  # early; again under the run's lock
    seed_loaded_engines(config.settings["seed"])  # the example's imports are loaded
    built = build(module, config.example, config.settings)
    try:
        engine = engine_for(built.model)
        loader = engine.resumable_loader(built.train_loader)
    except TypeError as exc:
        raise UserError(f"build(config) in {config.example}: {exc}") from None
    as_built, built = built.train_loader, built.with_loaders(loader, built.val_loader)
    model = built.model
    if job is not None:  # this rank's part: the model in DistributedDataParallel, its rows
        job.check_engine(engine, config.example)
        job.check_batch(int(config.settings["batch_size"]))
        model = job.wrap(built.model, engine)
        built = built.with_loaders(
            parallel.RankShare(built.train_loader, job.rank, job.world_size),
            parallel.RankShare(built.val_loader, job.rank, job.world_size, allow_empty=True))
    return Prepared(config, plugins, run_dir, default_dir, point, built, as_built, engine,
                    model)


def refuse_taken(run_dir: str) -> None:
    """A user error if ``run_dir`` already holds a run (a new run there would log its steps
    again after the old ones')."""
    try:
        taken = runs.holds_run(run_dir)
    except (OSError, ImportError) as exc:  # a URL: no backend, no bucket, no network
        raise UserError(f"cannot use the run directory {run_dir}: {exc}") from None
    if taken:
        raise UserError(f"{run_dir} already holds a run; use --resume {run_dir} "
                        "to continue it, or choose another --logdir")


def _new(given: Any) -> tuple[RunConfig, list, Any]:
    example = given.example or "shapes"
    module = load_example(example)
    config, plugins = resolve(given, canonical(example), getattr(module, "Options", None),
                              example_digest(example))
    return config, plugins, module


def _resumed(options: TrainOptions, given: Any,
             console: Console) -> tuple[RunConfig, list, checkpoints.ResumePoint, Any]:
    run_dir = options.resume
    if options.logdir and not storage.same_location(options.logdir, run_dir):
        raise UserError(f"--logdir {options.logdir} and --resume {run_dir} name two "
                        "run directories: --resume continues the run in its directory")
    point = checkpoints.find_resume_point(run_dir)
    for note in point.notes:
        console.warn(f"{note}; resuming from the checkpoint before it")
    recorded = point.config
    module = load_example(recorded.example)
    if recorded.example_digest not in (None, example_digest(recorded.example)):
        console.warn(f"{recorded.example} has changed since the run was recorded; "
                     "resuming with the file as it is now")
    same = given.example is None or canonical(given.example) == recorded.example
    config = reconcile(recorded, given, getattr(module, "Options", None), run_dir, same)
    if point.state is not None and point.epoch >= config.epochs and not _left_open(run_dir):
        raise AlreadyFinished(
            f"{run_dir}: already finished at epoch {point.epoch}; nothing to do "
            f"(give --epochs N with N > {point.epoch} to train it further)")
    return config, make_plugins(config, given), point, module


def _left_open(run_dir: str) -> bool:
    """A run whose training finished but whose hparams trial was not ended (stopped after its
    last checkpoint): resumed, it trains nothing and ends the trial, as the uninterrupted run
    did after that checkpoint."""
    try:
        return session_left_open(run_dir)
    except (OSError, ImportError) as exc:  # a URL: no backend, no bucket, no network
        raise UserError(f"cannot resume {run_dir}: {exc}") from None
