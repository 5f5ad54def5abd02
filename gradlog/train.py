"""The training loop behind ``gradlog train``: it builds the example, drives the plugins'
events, logs the standard metrics, checkpoints each epoch and on Ctrl-C, and resumes.

Exit codes: 0 done (also after ``StopTraining``), 1 the run failed (plugin failure,
``PluginAbort``, write error), 2 user error, 130 after SIGINT, 143 after SIGTERM.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from . import autograd, runs
from .autograd import random as _random
from .plugin import (
    PluginAbort,
    PluginConfigError,
    PluginError,
    PluginLoadError,
    Run,
    StopTraining,
    resolve_plugins,
)
from .plugin.options import load_config
from .progress import Progress

__all__ = ["TrainOptions", "UserError", "DEFAULT_PLUGINS", "train", "load_example"]

DEFAULT_PLUGINS = ("nan-guard", "histogram", "grad-norm", "gradcam")
REQUIRED_KEYS = ("model", "optimizer", "loss_fn", "train_loader", "val_loader")


class UserError(Exception):
    """A mistake in how gradlog train was called: one line, exit status 2."""


class _Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


@dataclass
class TrainOptions:
    """Everything ``gradlog train`` accepts (the CLI fills it in)."""

    example: str = "shapes"
    logdir: str | None = None
    epochs: int = 3
    batch_size: int = 64
    lr: float = 0.05
    seed: int = 0
    plugins: tuple = ()
    default_plugins: bool = True
    config_file: str | None = None
    strict_plugins: bool = False
    resume: str | None = None
    quiet: bool = False
    extra: dict = field(default_factory=dict)  # more build() settings, e.g. train_size


def load_example(example: str) -> Any:
    """The ``build`` function of a built-in example name or of a Python file."""
    from .examples import BUILTIN
    if example in BUILTIN:
        return importlib.import_module(BUILTIN[example]).build
    if not example.endswith(".py") and not os.path.exists(example):
        raise UserError(f"unknown example '{example}': give a built-in name "
                        f"({', '.join(sorted(BUILTIN))}) or a path to a .py file defining "
                        "build(config)")
    if not os.path.isfile(example):
        raise UserError(f"example file not found: {example}")
    spec = importlib.util.spec_from_file_location(
        f"gradlog_example_{abs(hash(os.path.abspath(example)))}", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    build = getattr(module, "build", None)
    if not callable(build):
        raise UserError(f"{example} does not define build(config)")
    return build


def train(options: TrainOptions, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``gradlog train``; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    from .utils.memory import reuse_freed_memory
    reuse_freed_memory()  # this process trains: keep each step's big temporaries for the next
    try:
        trainer = Trainer(options, out)
    except (UserError, PluginConfigError) as exc:
        err.write(f"error: {exc}\n")
        return 2
    except PluginLoadError as exc:
        err.write(f"error: {exc}\n")
        return 1
    return trainer.execute(err)


class Trainer:
    def __init__(self, options: TrainOptions, out: TextIO) -> None:
        self.opts = options
        self.out = out
        self.say = (lambda text: None) if options.quiet else (lambda text: print(text, file=out))
        self.file_config = load_config(options.config_file) if options.config_file else {}
        self.config = self._config()
        # plugins first: a typo in -p is reported before any data is built
        plugins = resolve_plugins(options.plugins, config=self.file_config,
                                  defaults=DEFAULT_PLUGINS if options.default_plugins else ())
        _random.manual_seed(self.config["seed"])
        self.built = self._build()
        self.model = self.built["model"]
        self.optimizer = self.built["optimizer"]
        self.scheduler = self.built.get("scheduler")
        self.run_dir, self.checkpoint = self._run_dir()
        self._files_before = set(os.listdir(self.run_dir))
        from .tensorboard import SummaryWriter
        start_step = int(self.checkpoint["step"]) if self.checkpoint else None
        if start_step is None and self.opts.resume and runs.has_events(self.run_dir):
            start_step = 0  # a run killed before its first checkpoint starts over: hide it all
        try:
            writer = SummaryWriter(log_dir=self.run_dir, purge_step=start_step, flush_secs=5)
        except OSError as exc:
            raise UserError(f"cannot write to the run directory {self.run_dir}: "
                            f"{exc.strerror or exc}") from None
        self.run = Run(self.model, self.optimizer, writer, plugins=plugins,
                       strict=options.strict_plugins, probe_sets=self.built.get("probe_sets"),
                       config=self.config, seed=self.config["seed"], auto_batches=False)
        self._checkpoint_step: int | None = None
        if self.checkpoint:
            self._restore(self.checkpoint)
        self.interrupted: int | None = None

    # -- setup -----------------------------------------------------------------------------
    def _config(self) -> dict:
        o = self.opts
        config = {"example": o.example, "epochs": o.epochs, "batch_size": o.batch_size,
                  "lr": o.lr, "seed": o.seed}
        file_train = self.file_config.get("train", {})
        if not isinstance(file_train, dict):
            raise UserError("the config's [train] entry must be a table")
        config.update(file_train)
        config.update(o.extra)
        for key in ("epochs", "batch_size"):
            if not isinstance(config[key], int) or config[key] < 1:
                raise UserError(f"--{key.replace('_', '-')} must be a positive integer, got "
                                f"{config[key]!r}")
        return config

    def _build(self) -> dict:
        build = load_example(self.opts.example)
        built = build(dict(self.config))
        if not isinstance(built, dict):
            raise UserError(f"build(config) in {self.opts.example} must return a dict, got "
                            f"{type(built).__name__}")
        missing = [k for k in REQUIRED_KEYS if built.get(k) is None]
        if missing:
            raise UserError(f"build(config) in {self.opts.example} did not return: "
                            f"{', '.join(missing)}")
        return built

    def _run_dir(self) -> tuple[str, dict | None]:
        if self.opts.resume:
            run_dir = self.opts.resume
            path = runs.newest_checkpoint(run_dir)
            if path is None:
                self.say(f"no checkpoint in {run_dir}: starting from scratch there")
                os.makedirs(run_dir, exist_ok=True)
                return run_dir, None
            try:
                state = runs.load_checkpoint(path)
            except (ValueError, OSError) as exc:
                raise UserError(f"cannot resume from {path}: {exc}") from None
            self.say(f"resuming from {path} (step {int(state['step'])})")
            return run_dir, state
        run_dir = self.opts.logdir or runs.default_run_dir()
        if runs.has_events(run_dir):
            raise UserError(f"{run_dir} already holds a run; use --resume {run_dir} to continue "
                            "it, or choose another --logdir")
        try:
            os.makedirs(run_dir, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create the run directory {run_dir}: "
                            f"{exc.strerror or exc}") from None
        return run_dir, None

    def _restore(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.built["train_loader"].load_state_dict(state["train_loader"])
        self.run.load_state_dict(state["run"])
        _random.set_rng_state(state["rng"])
        # The new event file hides the old session's steps >= the checkpoint's (purge_step);
        # what was logged at that step before the checkpoint (validation, epoch-end plugins)
        # is written again, byte for byte, so resuming loses no point.
        file_writer = self.run.writer._get_file_writer().event_writer
        for payload in state.get("events_at_step", ()):
            file_writer.write(np.asarray(payload, dtype=np.uint8).tobytes())

    def _state(self) -> dict:
        return {"step": self.run.step, "epoch": self.run.epoch,
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict() if self.scheduler else None,
                "train_loader": self.built["train_loader"].state_dict(),
                "run": self.run.state_dict(), "rng": _random.get_rng_state(),
                "config": {k: v for k, v in self.config.items()
                           if isinstance(v, (int, float, str, bool))}}

    def save_checkpoint(self, events_at_step: list | None = None, *,
                        flush_errors: bool = True) -> str:
        """Flush the event files, then write the checkpoint: a checkpoint on disk means every
        event logged before it is in the files too, so a run resumed from it (which hides the
        old session's steps from the checkpoint's on) neither loses nor repeats a step."""
        state = self._state()
        state["events_at_step"] = [np.frombuffer(p, dtype=np.uint8)
                                   for p in events_at_step or ()]
        try:
            self.run.writer.flush()
        except OSError:
            if flush_errors:
                raise
        path = runs.save_checkpoint(self.run_dir, state)
        self._checkpoint_step = self.run.step
        return path

    @contextlib.contextmanager
    def _events_at_step(self) -> Any:
        """Collect the serialized events logged at the current step inside the block: the
        ones a checkpoint at this step carries (see ``_restore``)."""
        from tensorboard.compat.proto.event_pb2 import Event
        step = self.run.step
        with self.run.writer.capture_events() as captured:
            yield captured
        captured[:] = [p for p in captured if Event.FromString(p).step >= step]

    # -- running -----------------------------------------------------------------------------
    def execute(self, err: TextIO) -> int:
        with self._signals():
            try:
                return self._run()
            except _Interrupted as exc:
                return self._stop_interrupted(exc.signum, err, checkpoint=True)
            except KeyboardInterrupt:  # a second Ctrl-C: mid-batch, keep the last checkpoint
                return self._stop_interrupted(signal.SIGINT, err, checkpoint=False)
            except StopTraining:
                self.run.finish()
                self._try_checkpoint(err)
                self.say("training stopped by a plugin")
                return 0
            except PluginConfigError as exc:  # found in a plugin's setup: still a user error
                self._finish_quietly(exc)
                self.run.writer.close()
                self._remove_new_files()
                err.write(f"error: {exc}\n")
                return 2
            except (PluginError, PluginAbort) as exc:
                self.run.finish(error=exc)
                err.write(f"error: {exc}\n")
                tb = getattr(exc, "traceback_text", "") or traceback.format_exc()
                err.write(tb)
                return 1
            except OSError as exc:
                self._try_checkpoint(err)
                self._finish_quietly(exc)
                path = exc.filename or self.run_dir
                err.write(f"error: cannot write {path}: {exc.strerror or exc}\n")
                return 1
            except Exception as exc:  # noqa: BLE001  (the model, the loss, a replaced value)
                # No checkpoint: the step failed half-way; the last one is kept.
                step, suspects = self.run.step, self.run.replaced_values()
                self._finish_quietly(exc)  # every plugin's on_exception, hooks removed, flushed
                blame = f" (values replaced in this step by {', '.join(suspects)})" \
                    if suspects else ""
                err.write(f"error: training failed at step {step}: {type(exc).__name__}: "
                          f"{exc}{blame}\n")
                err.write(traceback.format_exc())
                return 1

    def _run(self) -> int:
        run = self.run
        resumed = self.checkpoint is not None
        self._print_summary()
        run.start()
        if not resumed:
            self._log_config()
        for _epoch in range(run.epoch, self.config["epochs"]):
            self._train_epoch()
            with self._events_at_step() as events:
                metrics = self._validate()
                run.validation_end(metrics)
                run.epoch_end()
            if self.scheduler is not None and self.built.get("scheduler_interval",
                                                               "epoch") == "epoch":
                self.scheduler.step()
            if run.epoch == self.config["epochs"]:
                # before the last checkpoint: resuming a finished run logs no second trial
                self._log_hparams(metrics)
            self.save_checkpoint(events)
            self.say(f"epoch {run.epoch}/{self.config['epochs']}: "
                     + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
            if self.interrupted is not None:  # a signal during validation or the checkpoint
                raise _Interrupted(self.interrupted)
        run.finish()
        print(f"{'' if self.opts.quiet else chr(10)}view the run:  tensorboard --logdir "
              f"{self.run_dir}", file=self.out)
        return 0

    def _train_epoch(self) -> None:
        run, model, opt = self.run, self.model, self.optimizer
        loss_fn = self.built["loss_fn"]
        loader = self.built["train_loader"]
        step_scheduler = self.scheduler is not None and \
            self.built.get("scheduler_interval") == "step"
        run.epoch_start()
        model.train()
        progress = Progress(len(loader), f"epoch {run.epoch + 1}/{self.config['epochs']}",
                            self.out, enabled=not self.opts.quiet)
        done, last = 0, {}
        tick, ticks = time.perf_counter(), 0
        for batch in loader:
            x, y = run.begin_batch(batch)
            opt.zero_grad()
            output = model(x)
            loss = loss_fn(output, y)
            loss.backward()
            opt.step()
            last = {"loss": float(loss.item())}
            run.log_scalar("train/loss", last["loss"])
            acc = _accuracy(output, y)
            if acc is not None:
                last["acc"] = acc
                run.log_scalar("train/acc", acc)
            run.log_scalar("train/lr", float(opt.param_groups[0]["lr"]))
            ticks += 1
            if ticks == 20 or done + 1 == len(loader):  # every 20 steps and at epoch end
                now = time.perf_counter()
                run.log_scalar("train/steps_per_sec", ticks / max(now - tick, 1e-9))
                tick, ticks = now, 0
            if step_scheduler:
                self.scheduler.step()
            run.end_batch()
            done += 1
            progress.update(done, **last)
            if self.interrupted is not None:
                raise _Interrupted(self.interrupted)
        progress.close(**last)

    def _validate(self) -> dict:
        model, loss_fn = self.model, self.built["loss_fn"]
        was_training = model.training
        model.eval()
        self.run.phase = "validation"
        total, correct, loss_sum, counted = 0, 0, 0.0, True
        try:
            with autograd.no_grad():
                for x, y in self.built["val_loader"]:
                    output = model(x)
                    n = len(x)
                    loss_sum += float(loss_fn(output, y).item()) * n
                    acc = _accuracy(output, y)
                    if acc is None:
                        counted = False
                    else:
                        correct += acc * n
                    total += n
        finally:
            self.run.phase = "train"
            model.train(was_training)
        metrics = {"val/loss": loss_sum / max(total, 1)}
        if counted and total:
            metrics["val/acc"] = correct / total
        return metrics

    # -- reporting -----------------------------------------------------------------------------
    def _print_summary(self) -> None:
        lines = ["model:"]
        total = 0
        for name, module in self.model.named_modules():
            n = sum(p.numel() for p in module.parameters(recurse=False))
            total += n
            if n:
                lines.append(f"  {name or '(root)':<24} {type(module).__name__:<20} {n:>10,}")
        lines.append(f"  {'total':<45} {total:>10,}")
        order = ", ".join(f"{p.name} ({p.kind}, {p.order})" for p in self.run.plugins)
        lines.append(f"plugins, in order: {order or '(none)'}")
        lines.append(f"run directory: {self.run_dir}")
        self.say("\n".join(lines))

    def _log_config(self) -> None:
        rows = [f"| {k} | {v} |" for k, v in sorted(self.config.items())]
        for p in self.run.plugins:
            opts = vars(p.options) if p.options is not None else {}
            rows += [f"| {p.name}.{k} | {v} |" for k, v in opts.items()]
        self.run.log_text("config", "| option | value |\n|---|---|\n" + "\n".join(rows), 0)
        self.run.log_text("model", "```\n" + repr(self.model) + "\n```", 0)

    def _log_hparams(self, metrics: dict) -> None:
        hparams = {k: v for k, v in self.config.items()
                   if isinstance(v, (int, float, str, bool))}
        for p in self.run.plugins:
            for k, v in (vars(p.options) if p.options is not None else {}).items():
                if isinstance(v, (int, float, str, bool)):
                    hparams[f"{p.name}.{k}"] = v
        trial = os.path.join(self.run_dir, "hparams")
        try:
            # One trial per run, in a fixed directory: a resumed run that logs it again hides
            # the earlier session's copy (purge at step 0) instead of adding a second trial.
            from .tensorboard import SummaryWriter
            with SummaryWriter(trial, purge_step=0 if runs.has_events(trial) else None) as w:
                w.add_hparams(hparams, {f"hparam/{k.replace('/', '_')}": v
                                        for k, v in metrics.items()}, run_name=".")
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001  (hparams are a summary, not the run)
            self.say(f"warning: could not log hparams: {exc}")

    # -- interruption ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _signals(self) -> Any:
        """SIGINT/SIGTERM finish the current batch, then checkpoint, flush and exit (130/143);
        a second signal stops at once."""
        import threading
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            if self.interrupted is not None:
                raise KeyboardInterrupt
            self.interrupted = signum

        saved = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in saved.items():
                signal.signal(s, h)

    def _stop_interrupted(self, signum: int, err: TextIO, *, checkpoint: bool) -> int:
        if checkpoint:
            self._try_checkpoint(err)
        self._finish_quietly(KeyboardInterrupt())
        name = signal.Signals(signum).name
        saved = "checkpoint saved" if checkpoint else "the last checkpoint is kept"
        err.write(f"\n{name}: {saved} in {self.run_dir}; continue with "
                  f"gradlog train --resume {self.run_dir}\n")
        return 128 + int(signum)

    def _remove_new_files(self) -> None:
        """A run that failed before its first step leaves no event file behind, so the same
        --logdir can be used again once the mistake is fixed."""
        for name in set(os.listdir(self.run_dir)) - self._files_before:
            path = os.path.join(self.run_dir, name)
            if "tfevents" in name and os.path.isfile(path):
                os.remove(path)
        if not os.listdir(self.run_dir):
            os.rmdir(self.run_dir)

    def _try_checkpoint(self, err: TextIO) -> None:
        if self._checkpoint_step == self.run.step:
            return  # saved at this step already (the end of an epoch)
        try:
            self.save_checkpoint(flush_errors=False)
        except Exception as exc:  # noqa: BLE001  (report, then exit with the real reason)
            err.write(f"warning: could not save a checkpoint: {exc}\n")

    def _finish_quietly(self, error: BaseException) -> None:
        try:
            self.run.finish(error=error)
        except Exception:  # noqa: BLE001
            pass


def _accuracy(output: Any, target: Any) -> float | None:
    """Accuracy when targets are class indices for a (batch, classes) output."""
    from .plugin.adapter import to_numpy
    y = to_numpy(target)
    out = to_numpy(output)
    if y.dtype.kind not in "iu" or out.ndim != 2 or y.shape != out.shape[:1]:
        return None
    return float(np.mean(np.argmax(out, axis=1) == y))
