"""One process of ``gradlog train`` from a checked command (:mod:`.preparation`) to the end
of its run: the run directory claimed, ``run.toml``, the writer and the Run (:meth:`Trainer.open`),
then the loop (:meth:`Trainer.execute`), and what each way of ending leaves behind (a
checkpoint, closed event files, no new files after a failed start).

The trainer raises; :mod:`.command` turns what it raises into the exit status. Started as one
rank of a job (:mod:`.parallel`), rank 0 alone writes the run directory.
"""

from __future__ import annotations

import os
import shutil
import traceback
from typing import Any

from .. import storage
from ..plugin import PluginAbort, PluginConfigError, PluginError, Run, StopTraining
from ..plugin.ranks import rank_run_dir
from ..plugin.writers import open_writer
from . import checkpoints, parallel, runs
from .console import Console
from .errors import Interrupted, RunFailed, UserError
from .logged import flat_config, log_session_end, log_session_start, log_start_texts
from .loop import Loop, SchedulerError
from .preparation import Prepared, refuse_taken
from .run_lock import LOCK_NAME, RunLock
from .signals import SignalOwner
from .summary import model_summary

__all__ = ["Trainer"]

FLUSH_SECS = 5  # gradlog train flushes its event files at least this often


class Trainer:
    """One process's run of a prepared command: :meth:`open` creates what it writes,
    :meth:`execute` trains; :meth:`release` lets the run directory go."""

    def __init__(self, prepared: Prepared, console: Console, signals: SignalOwner,
                 job: parallel.Job | None = None) -> None:
        self.console, self.signals, self.job = console, signals, job
        self.writes = job is None or job.rank == 0  # rank 0 alone writes the run directory
        self.config, self.plugins = prepared.config, prepared.plugins
        self.run_dir, self._default_dir = prepared.run_dir, prepared.default_dir
        self.point, self.built = prepared.point, prepared.built
        self.engine, self.model = prepared.engine, prepared.model
        self.loader_as_built = prepared.loader_as_built
        self.run: Run | None = None
        self._saved_step: int | None = None
        self._lock: RunLock | None = None  # held by the process that writes the run
        self._created, self._before = False, set()

    # -- set-up ----------------------------------------------------------------------------
    def open(self) -> None:
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
                self.run = Run(self.model, self.built.optimizer, writer,
                               plugins=self.plugins, strict=self.config.strict_plugins,
                               probe_sets=self.built.probe_sets,
                               config=flat_config(self.config),
                               seed=self.config.settings["seed"], hooks=False,
                               engine=self.engine, report=self.console.warn,
                               say=self.console.say,
                               rank_writer=self._rank_writer, owns_writer=False)
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
            refuse_taken(self.run_dir)

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
        purge, replay = None, None
        if self.point is not None and self.point.state is not None:
            purge, replay = self.point.step, self.point.state.get("events")
        elif self.point is not None and runs.has_events(self.run_dir):
            purge = 0
        try:
            return open_writer(self.run_dir, purge_step=purge, replay=replay,
                               flush_secs=FLUSH_SECS)
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
        path = rank_run_dir(self.run_dir, rank)
        purge = self.point.step if self.point is not None and runs.has_events(path) else None
        return open_writer(path, purge_step=purge, flush_secs=FLUSH_SECS)

    # -- running -----------------------------------------------------------------------------
    def execute(self) -> None:
        """Train to the end, or stop as the run asks (``StopTraining``: a checkpoint, then a
        normal end). Otherwise raises, after saving and closing what the way it ended calls
        for: ``Interrupted`` (with its report), ``PluginConfigError`` (a plugin's setup:
        still a user error), ``RunFailed``."""
        try:
            self._train()
        except Interrupted as exc:
            raise self._interrupted(exc) from None
        except StopTraining:
            self._try_checkpoint()
            self._end()
            self.console.say("training stopped by a plugin")
        except PluginConfigError as exc:  # found in a plugin's setup: nothing to keep
            self._finish_quietly(exc)
            self._remove_new_files()
            raise
        except SchedulerError as exc:  # an extended run's scheduler: its plan has ended
            self._finish_quietly(exc)
            raise RunFailed(str(exc)) from None
        except (PluginError, PluginAbort) as exc:
            self._finish_quietly(exc)
            raise RunFailed(str(exc), getattr(exc, "traceback_text", "")
                            or traceback.format_exc()) from None
        except OSError as exc:  # a write error: the last checkpoint whose events are on disk
            kept = self._try_checkpoint() or f"checkpoint saved at step {self.run.step}"
            self._finish_quietly(exc)
            reason = str(exc.strerror or exc)
            if storage.is_url(self.run_dir) and storage.spool_dir(self.run_dir) not in reason \
                    and storage.spool_holds_files(self.run_dir):  # an error before any upload
                reason += "; " + storage.unsent(storage.spool_dir(self.run_dir), self.run_dir)
            raise RunFailed(f"cannot write {exc.filename or self.run_dir}: {reason}; "
                            f"{kept}") from None
        except Exception as exc:  # noqa: BLE001  (the model, the loss, a replaced value)
            # No checkpoint: the step failed half-way; the last one is kept.
            step, suspects = self.run.step, self.run.replaced_values()
            self._finish_quietly(exc)  # every plugin's on_exception, hooks removed, flushed
            blame = f" (values replaced in this step by {', '.join(suspects)})" \
                if suspects else ""
            raise RunFailed(f"training failed at step {step}: {type(exc).__name__}: "
                            f"{exc}{blame}", traceback.format_exc()) from None

    def warn_disabled(self) -> None:
        """Name the plugins the run disabled (the last lines of its output)."""
        if self.run is not None:
            for name, why in self.run.disabled_plugins():
                self.console.warn(f"plugin '{name}' was disabled during the run: {why}")

    def _train(self) -> None:
        self._print_start()
        with self.signals.graceful():
            self.run.start()
            if self.point is None or self.point.state is None:
                log_start_texts(self.run, self.config, self.built.model)
                if self.run.writer is not None:  # rank 0
                    log_session_start(self.run.writer, self.config)
            extended = self.point is not None and self.point.config.epochs < self.config.epochs
            Loop(self.run, self.built, self.config, self.console, self.signals,
                 self._save, self.point.config.epochs if extended else None,
                 model=self.model).run_epochs()
        self._end()
        self.console.result(f"{'' if self.console.quiet else chr(10)}view the run:  "
                            f"tensorboard --logdir {self.run_dir}")

    def _end(self) -> None:
        """The run ends (the plugins' ``on_train_end``), then its hparams trial, last of all
        and after the last checkpoint: a run extended later hides this end, then writes its
        own (before the checkpoint, its replay would bring it back into the extension). A
        process stopped between that checkpoint and this end leaves the trial open: resumed,
        it trains nothing and ends here (:mod:`.preparation`). Errors are raised, the event
        files closed."""
        try:
            self.run.finish()
            if self.run.writer is not None:
                log_session_end(self.run.writer, self.run.step)
        except BaseException:
            self._close_writer()
            raise
        if self.run.writer is not None:
            self.run.writer.close()

    def _print_start(self) -> None:
        order = ", ".join(f"{p.name} ({p.kind}, {p.order})" for p in self.run.plugins)
        lines = [model_summary(self.built.model, self.loader_as_built, self.engine),
                 f"plugins, in order: {order or '(none)'}", f"run directory: {self.run_dir}"]
        if self.point is not None and self.point.state is not None:
            lines.append(f"resuming from {os.path.basename(self.point.path)} (step "
                         f"{self.point.step}, epoch {self.point.epoch} of {self.config.epochs})")
            if self.point.epoch >= self.config.epochs:
                lines.append("its training had finished; the run was stopped before it "
                             "ended its hparams trial, which it ends now")
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
    def _interrupted(self, exc: Interrupted) -> Interrupted:
        """``exc`` with its report, once the checkpoint is saved (graceful) or the last one
        kept, and the event files closed."""
        kept = self._try_checkpoint() if exc.graceful else self._last_checkpoint()
        self._finish_quietly(KeyboardInterrupt())
        if exc.graceful and self.job is not None:
            # every rank stopped at this batch: wait for rank 0's checkpoint and event files,
            # since a rank that leaves with a non-zero status ends the job's other processes
            self.job.collectives.barrier()
        return Interrupted(exc.signum, exc.graceful,
                           f"\n{exc}: {kept or 'checkpoint saved'} in {self.run_dir}; "
                           f"continue with gradlog train --resume {self.run_dir}")

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
        """The plugins' ``on_exception``, hooks removed, event files closed."""
        try:
            self.run.finish(error=error)
        except Exception:  # noqa: BLE001
            pass
        self._close_writer()

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
