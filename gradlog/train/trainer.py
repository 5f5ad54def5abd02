"""``gradlog train`` from its options to its exit status: the configuration (a new run's, or a
resumed run's reconciled with what was given again), the example built, the run directory,
``run.toml``, the writer and the Run, then the loop, and every way a run can end.

Exit statuses: 0 done (also after ``StopTraining``, and for a run already finished); 1 the run
failed (a mutator's or strict plugin's failure, ``PluginAbort``, a write error, an enabled
plugin that fails to import); 2 a user error; 130 after SIGINT and 143 after SIGTERM.

With ``--nproc N`` this process launches the ranks (:mod:`.launch`); started as one rank of a
job, it trains its share (:mod:`.parallel`): rank 0 alone writes the run directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import traceback
from typing import Any, TextIO

from .. import runs, storage
from ..engines import engine_for, seed_loaded_engines
from ..plugin import PluginAbort, PluginConfigError, PluginError, PluginLoadError, Run, StopTraining
from ..plugin.ranks import rank_run_dir
from . import checkpoints, parallel
from .config import TrainOptions, make_plugins, read_given, reconcile, resolve
from .console import Console
from .errors import Interrupted, UserError
from .example import build, canonical, example_digest, load_example
from .logged import flat_config, log_start_texts
from .loop import Loop, SchedulerError
from .run_lock import LOCK_NAME, RunLock
from .signals import SignalOwner
from .summary import model_summary

__all__ = ["train", "Trainer", "prepared"]


class AlreadyFinished(Exception):
    """``--resume`` of a run that has trained all its epochs (and no larger ``--epochs``)."""


def train(options: TrainOptions, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``gradlog train``; returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    if options.nproc > 1:
        from .launch import launch
        return launch(options, Console(out, err, options.quiet))
    try:
        job = parallel.join()
    except UserError as exc:
        Console(out, err).error(str(exc))
        return 2
    if job is None:
        return _train(options, Console(out, err, options.quiet), None)
    if job.rank == 0:
        console = Console(out, err, options.quiet)
        status = _train(options, console, job)
    else:  # the other ranks say only what goes wrong, prefixed with their rank
        with open(os.devnull, "w") as silent:
            console = Console(silent, err, True, prefix=f"rank {job.rank}: ")
            status = _train(options, console, job)
    job.finish(status, console.last_error)
    return status


def _train(options: TrainOptions, console: Console, job: parallel.Job | None) -> int:
    from ..utils.memory import reuse_freed_memory
    reuse_freed_memory()  # this process trains: keep each step's big temporaries for the next
    with SignalOwner() as signals:
        trainer = prepared(options, console, signals, job, open_run=True)
        if isinstance(trainer, int):
            return trainer
        try:
            return trainer.execute()
        finally:
            trainer.release()


def prepared(options: TrainOptions, console: Console, signals: SignalOwner | None = None,
             job: parallel.Job | None = None, open_run: bool = False) -> Trainer | int:
    """The Trainer of ``options`` (its run directory opened with ``open_run``), or the exit
    status of a command that ends before training: a user error (2), a plugin that cannot be
    imported (1), a run already finished (0), an interruption."""
    owner = SignalOwner() if signals is None else contextlib.nullcontext(signals)
    with owner as signals:
        try:
            return Trainer(options, console, signals, job, open_run=open_run)
        except AlreadyFinished as done:
            console.result(str(done))
            return 0
        except (UserError, PluginConfigError) as exc:
            console.error(str(exc), getattr(exc, "detail", ""))
            return 2
        except PluginLoadError as exc:
            console.error(str(exc))
            return 1
        except Interrupted as exc:
            console.notice(f"{exc}: interrupted while starting; nothing was trained")
            return exc.exit_status


class Trainer:
    """One ``gradlog train`` command: set up in ``__init__`` (nothing is written before the
    configuration, plugins and example are known to be good), run by :meth:`execute`."""

    def __init__(self, options: TrainOptions, console: Console, signals: SignalOwner,
                 job: parallel.Job | None = None, *, open_run: bool = True) -> None:
        self.console, self.signals, self.job = console, signals, job
        self.writes = job is None or job.rank == 0  # rank 0 alone writes the run directory
        self.point: checkpoints.ResumePoint | None = None
        self._default_dir = False  # no --logdir: a directory named by the time (see _new)
        self.run: Run | None = None
        self._saved_step: int | None = None
        self._lock: RunLock | None = None  # held by the process that writes the run
        given = read_given(options)
        if options.resume:
            self._resume(options, given)
        else:
            self._new(options, given)
        seed_loaded_engines(self.config.settings["seed"])  # the example's imports are loaded
        self.built = build(self.module, self.config.example, self.config.settings)
        self._engine_for_built()
        self.model = self.built["model"]  # what trains: the model, or its parallel wrapper
        if job is not None:
            self._share()
        if open_run:
            self._open()
            if job is not None:
                job.collectives.barrier()  # rank 0 has checked and created the directory

    # -- set-up ----------------------------------------------------------------------------
    def _new(self, options: TrainOptions, given: Any) -> None:
        example = given.example or "shapes"
        self.module = load_example(example)
        self.config, self.plugins = resolve(given, canonical(example),
                                            getattr(self.module, "Options", None),
                                            example_digest(example))
        # (a default directory is only a name until _open claims it, or the next free one,
        # and tells the other ranks which)
        self._default_dir = not options.logdir
        self.run_dir = options.logdir or runs.default_run_dir()
        if self.writes and not self._default_dir:
            self._refuse_taken()  # early; again under the run's lock (_claim)

    def _refuse_taken(self) -> None:
        try:
            taken = runs.holds_run(self.run_dir)
        except (OSError, ImportError) as exc:  # a URL: no backend, no bucket, no network
            raise UserError(f"cannot use the run directory {self.run_dir}: {exc}") from None
        if taken:
            raise UserError(f"{self.run_dir} already holds a run; use --resume {self.run_dir} "
                            "to continue it, or choose another --logdir")

    def _resume(self, options: TrainOptions, given: Any) -> None:
        self.run_dir = options.resume
        if options.logdir and not storage.same_location(options.logdir, options.resume):
            raise UserError(f"--logdir {options.logdir} and --resume {options.resume} name two "
                            "run directories: --resume continues the run in its directory")
        point = checkpoints.find_resume_point(self.run_dir)
        for note in point.notes:
            self.console.warn(f"{note}; resuming from the checkpoint before it")
        recorded = point.config
        self.module = load_example(recorded.example)
        if recorded.example_digest not in (None, example_digest(recorded.example)):
            self.console.warn(f"{recorded.example} has changed since the run was recorded; "
                              "resuming with the file as it is now")
        same = given.example is None or canonical(given.example) == recorded.example
        self.config = reconcile(recorded, given, getattr(self.module, "Options", None),
                                self.run_dir, same)
        if point.state is not None and point.epoch >= self.config.epochs:
            raise AlreadyFinished(
                f"{self.run_dir}: already finished at epoch {point.epoch}; nothing to do "
                f"(give --epochs N with N > {point.epoch} to train it further)")
        self.plugins = make_plugins(self.config, given)
        self.point = point

    def _engine_for_built(self) -> None:
        """The run's engine, gradlog's own or PyTorch's, from the model's type; the training
        loader made resumable through it (a torch DataLoader continues mid-epoch)."""
        self.loader_as_built = self.built["train_loader"]  # the model summary's example
        try:
            self.engine = engine_for(self.built["model"])
            self.built["train_loader"] = self.engine.resumable_loader(self.loader_as_built)
        except TypeError as exc:
            raise UserError(f"build(config) in {self.config.example}: {exc}") from None

    def _share(self) -> None:
        """This rank's part: the model in DistributedDataParallel, its rows of each batch."""
        job = self.job
        job.check_engine(self.engine, self.config.example)
        job.check_batch(int(self.config.settings["batch_size"]))
        self.model = job.wrap(self.built["model"], self.engine)
        self.built["train_loader"] = parallel.RankShare(self.built["train_loader"], job.rank,
                                                        job.world_size)
        self.built["val_loader"] = parallel.RankShare(self.built["val_loader"], job.rank,
                                                      job.world_size, allow_empty=True)

    def _open(self) -> None:
        """Create what the run writes to: its directory, ``run.toml``, the writer, the Run;
        a resumed run's state restored. A new run that fails here leaves nothing behind."""
        try:
            if self._default_dir:
                if self.writes:
                    self.run_dir = runs.claim_new_dir(self.run_dir)
                if self.job is not None:  # the directory rank 0 took
                    self.run_dir = self.job.collectives.broadcast_text(self.run_dir)
            self._created = self._default_dir or not runs.exists(self.run_dir)
            self._before = set() if self._created else set(runs.names(self.run_dir))
        except OSError as exc:
            raise UserError(f"cannot use the run directory {self.run_dir}: {exc}") from None
        try:
            try:
                if self.writes:
                    self._claim()
                if self.point is not None and self.writes:
                    self._upload_spool()
                    self._before = set(runs.names(self.run_dir))  # the uploads are the run's
                runs.makedirs(self.run_dir)
                if self.writes and (self.point is None or self.point.config != self.config or
                                    not runs.has_file(self.run_dir, runs.RUN_TOML)):
                    orders = {p.name: p.order for p in self.plugins}
                    runs.write_run_toml(self.run_dir, self.config.to_toml(orders))
            except OSError as exc:
                raise UserError(f"cannot write to the run directory {self.run_dir}: "
                                f"{exc.strerror or exc}") from None
            writer = self._writer() if self.writes else None
            try:
                self.run = Run(self.model, self.built["optimizer"], writer,
                               plugins=self.plugins, strict=self.config.strict_plugins,
                               probe_sets=self.built.get("probe_sets"),
                               config=flat_config(self.config),
                               seed=self.config.settings["seed"], hooks=False,
                               engine=self.engine, report=self.console.warn,
                               say=self.console.say,
                               rank_writer=self._rank_writer)
            except BaseException:
                if writer is not None:
                    writer.close()
                raise
            if self.point is not None and self.point.state is not None:
                checkpoints.restore(self.point.state, self.run, self.built)
        except BaseException:
            if self.run is not None:
                self._close_writer()
            self._remove_new_files()
            self.release()
            raise

    def _claim(self) -> None:
        """Hold the run directory for this process's life (:mod:`.run_lock`). Under the lock,
        what the directory holds is known (another command may have written a run since
        ``_new`` looked): a new run checks again that it holds none."""
        runs.makedirs(self.run_dir)
        self._lock = RunLock(self.run_dir)
        self._before = set(runs.names(self.run_dir))
        self._created = self._created and self._before <= {LOCK_NAME}
        if self.point is None and not self._default_dir:
            self._refuse_taken()

    def release(self) -> None:
        """Let the run directory go (the end of the process does it too)."""
        if self._lock is not None:
            self._lock.release()

    def _upload_spool(self) -> None:
        """A resumed run at a URL first uploads what an earlier session left in its spool
        (a segment it was writing when killed, or those it could not upload)."""
        uploaded = checkpoints.upload_spool(self.run_dir)
        if uploaded:
            self.console.say(f"uploaded {len(uploaded)} event file(s) an earlier session left "
                             f"in {storage.spool_dir(self.run_dir)}")

    def _writer(self) -> Any:
        """The run's writer: a resumed run hides the earlier sessions' steps from its
        checkpoint on (all of them when it starts over) and replays what preceded it."""
        from ..tensorboard import SummaryWriter
        purge, replay = None, None
        if self.point is not None and self.point.state is not None:
            purge, replay = self.point.step, self.point.state.get("events")
        elif self.point is not None and runs.has_events(self.run_dir):
            purge = 0
        try:
            return SummaryWriter(log_dir=self.run_dir, purge_step=purge, replay=replay,
                                 flush_secs=5)
        except FileNotFoundError as exc:
            if replay:
                raise UserError(f"cannot resume {self.run_dir}: {exc.strerror}: "
                                f"{exc.filename}") from None
            raise UserError(f"cannot write to the run directory {self.run_dir}: "
                            f"{exc.strerror}") from None
        except OSError as exc:
            raise UserError(f"cannot write to the run directory {self.run_dir}: "
                            f"{exc.strerror or exc}") from None
        except ValueError as exc:  # a damaged event file the replay had to read
            raise UserError(f"cannot resume {self.run_dir}: {exc}") from None

    def _rank_writer(self, rank: int) -> Any:
        """Rank ``rank``'s sub-run (per-rank plugin values); resumed, it hides the steps from
        the checkpoint on, as the run's writer does."""
        from ..tensorboard import SummaryWriter
        path = rank_run_dir(self.run_dir, rank)
        purge = None
        if self.point is not None and runs.has_events(path):
            purge = self.point.step
        return SummaryWriter(log_dir=path, purge_step=purge, flush_secs=5)

    # -- running -----------------------------------------------------------------------------
    def execute(self) -> int:
        try:
            return self._train()
        except Interrupted as exc:
            return self._interrupted(exc)
        except StopTraining:
            self._try_checkpoint()
            self.run.finish()
            self.console.say("training stopped by a plugin")
            return 0
        except PluginConfigError as exc:  # found in a plugin's setup: still a user error
            self._finish_quietly(exc)
            self._close_writer()
            self._remove_new_files()
            self.console.error(str(exc))
            return 2
        except SchedulerError as exc:  # an extended run's scheduler: its plan has ended
            self._finish_quietly(exc)
            self.console.error(str(exc))
            return 1
        except (PluginError, PluginAbort) as exc:
            self._finish_quietly(exc)
            self.console.error(str(exc), getattr(exc, "traceback_text", "")
                               or traceback.format_exc())
            return 1
        except OSError as exc:  # a write error: the last checkpoint whose events are on disk
            kept = self._try_checkpoint() or f"checkpoint saved at step {self.run.step}"
            self._finish_quietly(exc)
            self._close_writer()
            reason = str(exc.strerror or exc)
            if storage.is_url(self.run_dir) and storage.spool_dir(self.run_dir) not in reason \
                    and storage.spool_holds_files(self.run_dir):  # an error before any upload
                reason += "; " + storage.unsent(storage.spool_dir(self.run_dir), self.run_dir)
            self.console.error(f"cannot write {exc.filename or self.run_dir}: {reason}; {kept}")
            return 1
        except Exception as exc:  # noqa: BLE001  (the model, the loss, a replaced value)
            # No checkpoint: the step failed half-way; the last one is kept.
            step, suspects = self.run.step, self.run.replaced_values()
            self._finish_quietly(exc)  # every plugin's on_exception, hooks removed, flushed
            blame = f" (values replaced in this step by {', '.join(suspects)})" \
                if suspects else ""
            self.console.error(f"training failed at step {step}: {type(exc).__name__}: "
                               f"{exc}{blame}", traceback.format_exc())
            return 1
        finally:
            for name, why in self.run.disabled_plugins():
                self.console.warn(f"plugin '{name}' was disabled during the run: {why}")

    def _train(self) -> int:
        self._print_start()
        with self.signals.graceful():
            self.run.start()
            if self.point is None or self.point.state is None:
                log_start_texts(self.run, self.config, self.built["model"])
            extended = self.point is not None and self.point.config.epochs < self.config.epochs
            Loop(self.run, self.built, self.config, self.run_dir, self.console, self.signals,
                 self._save, self.point.config.epochs if extended else None,
                 model=self.model).run_epochs()
        self.run.finish()
        self.console.result(f"{'' if self.console.quiet else chr(10)}view the run:  "
                            f"tensorboard --logdir {self.run_dir}")
        return 0

    def _print_start(self) -> None:
        order = ", ".join(f"{p.name} ({p.kind}, {p.order})" for p in self.run.plugins)
        lines = [model_summary(self.built["model"], self.loader_as_built, self.engine),
                 f"plugins, in order: {order or '(none)'}", f"run directory: {self.run_dir}"]
        if self.point is not None and self.point.state is not None:
            lines.append(f"resuming from {os.path.basename(self.point.path)} (step "
                         f"{self.point.step}, epoch {self.point.epoch} of {self.config.epochs})")
        elif self.point is not None:
            lines.append(f"no checkpoint in {self.run_dir} yet: the run starts over, with the "
                         f"configuration in its {runs.RUN_TOML}")
        self.console.say("\n".join(lines))

    def _save(self) -> None:
        """A checkpoint at the current step, its event files fsynced first (by rank 0; the
        other ranks end the batch as it does)."""
        if not self.writes:
            self.run.state_dict()
            self._saved_step = self.run.step
            return
        state = checkpoints.capture(self.run, self.built, self.config, self.run.writer)
        checkpoints.save(self.run_dir, state)
        self._saved_step = self.run.step

    # -- stopping ----------------------------------------------------------------------------
    def _interrupted(self, exc: Interrupted) -> int:
        kept = self._try_checkpoint() if exc.graceful else self._last_checkpoint()
        self._finish_quietly(KeyboardInterrupt())
        self._close_writer()
        self.console.notice(f"\n{exc}: {kept or 'checkpoint saved'} in {self.run_dir}; "
                            f"continue with gradlog train --resume {self.run_dir}")
        if exc.graceful and self.job is not None:
            # every rank stopped at this batch: wait for rank 0's checkpoint and event files,
            # since a rank that leaves with a non-zero status ends the job's other processes
            self.job.collectives.barrier()
        return exc.exit_status

    def _last_checkpoint(self) -> str:
        try:
            steps = [step for step, _ in runs.checkpoints(self.run_dir)]
        except OSError:  # a URL that cannot be reached: what this session knows
            steps = [s for s in (self.point.step if self.point and self.point.state else None,
                                 self._saved_step) if s is not None]
        return f"the last checkpoint (step {max(steps)}) is kept" if steps else \
            "there is no checkpoint yet (resuming starts the run over)"

    def _try_checkpoint(self) -> str | None:
        """Save a checkpoint unless one was saved at this step; None if there is one, else
        why not."""
        if self._saved_step == self.run.step:
            return None
        try:
            self._save()
        except Interrupted:
            return f"interrupted again while saving: {self._last_checkpoint()}"
        except OSError:  # the event files could not be synced: a checkpoint would claim
            return self._last_checkpoint()  # events that are not on disk
        except Exception as exc:  # noqa: BLE001  (report, then exit with the real reason)
            return f"no checkpoint could be saved ({exc}); {self._last_checkpoint()}"
        return None

    def _finish_quietly(self, error: BaseException) -> None:
        try:
            self.run.finish(error=error)
        except Exception:  # noqa: BLE001
            pass

    def _close_writer(self) -> None:
        """Close every event file, dropping what cannot be written (already reported): no
        open writer is left for the exit handler to fail on again."""
        try:
            if self.run.writer is not None:
                self.run.writer.close()
        except OSError:
            pass

    def _remove_new_files(self) -> None:
        """A run that failed before its first step leaves nothing behind (a resumed one: no
        new event file), so the same command can be given again once the mistake is fixed."""
        if self._lock is None or not runs.isdir(self.run_dir):
            return  # not this process's run to clean up
        for name in set(runs.names(self.run_dir)) - self._before:
            path = storage.join(self.run_dir, name)
            if not storage.is_url(path) and os.path.isdir(storage.local_path(path)):
                shutil.rmtree(storage.local_path(path), ignore_errors=True)
            else:
                runs.remove(path)
        if self._created and not storage.is_url(self.run_dir) and \
                set(runs.names(self.run_dir)) <= {LOCK_NAME}:
            shutil.rmtree(storage.local_path(self.run_dir))
