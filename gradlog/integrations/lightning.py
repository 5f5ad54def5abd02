"""Lightning: ``GradlogCallback``, gradlog's plugins in a ``Trainer`` of ``lightning`` or
``pytorch_lightning``.

Lightning runs forward and backward inside ``optimizer.step(closure)``, so the callback does
not hook the optimizer: it drives its run's step driver (``watch_driven``) from Lightning's
own hooks.

* ``on_train_start``: the run starts with the ``LightningModule`` and its optimizer, at
  ``trainer.global_step`` (by then Lightning has restored a checkpoint it resumes from).
* ``on_train_batch_start``: a batch starts; with ``accumulate_grad_batches`` each micro-batch
  is one more batch of the same step.
* ``on_before_optimizer_step``: the gradients are final: Lightning calls it once per
  optimizer step, after accumulation and after the AMP scaler's ``unscale_``, before its own
  gradient clipping (``gradient_clip_val``).
* ``on_train_batch_end`` of the batch that stepped: the step is done (or was skipped by the
  ``16-mixed`` loss scaler), then the batch ends with ``trainer.callback_metrics``.
* ``on_validation_start/end`` (not the sanity check): the validation phase, then
  ``on_validation_end(trainer.callback_metrics)``.
* ``on_fit_end`` and ``on_exception`` end the run (what was written stays readable).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from ..engines.base import map_tensors
from ..plugin.discovery import merge_plugins
from ..plugin.watch import WatchSettings

__all__ = ["GradlogCallback", "DEFAULT_PLUGINS"]

# observers only: a callback added to see the gradients changes no step (nan-guard, a mutator
# that skips steps, is one to add by name)
DEFAULT_PLUGINS = ("histogram", "grad-norm")
_PACKAGES = ("lightning.pytorch", "pytorch_lightning")


class GradlogCallback:
    """A Lightning ``Callback`` that runs gradlog's plugins on the ``LightningModule`` and its
    optimizer and logs to TensorBoard.

    Args:
        plugins: ``-p``-style strings (``"grad-norm:every=10"``), plugin classes or instances.
        logdir: where to write; default: the directory of the trainer's ``TensorBoardLogger``
            (its ``version_N`` folder, beside Lightning's own scalars), else a new
            ``runs/<time>_<host>``.
        every: how often (optimizer steps) the plugins named in ``plugins`` log, unless their
            string sets its own ``every``.
        strict, config, max_failures: as in ``gl.watch``.

    Under data-parallel strategies every rank runs the plugins and only global rank 0 writes.
    The callback's ``state_dict`` (in Lightning's checkpoints) continues the run's steps and
    plugin state when a fit resumes from one. ``settings`` holds the arguments
    (``WatchSettings``); ``run`` is the running ``gradlog.plugin.Run``
    (None outside ``fit``).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> GradlogCallback:
        if cls is GradlogCallback:  # a Callback of the Lightning package(s) in use
            cls = _callback_class(_callback_bases())
        return super().__new__(cls)

    def __init__(self, plugins: Any = DEFAULT_PLUGINS, logdir: str | None = None,
                 every: int | None = 100, *, strict: bool = False, config: Any = None,
                 max_failures: int = 3) -> None:
        self.settings = WatchSettings(plugins, logdir, every, strict, config, max_failures)
        self.run: Any = None
        self._restored: dict | None = None  # the run state of the checkpoint a fit resumes
        self._stepped = False  # this batch's optimizer step came (on_before_optimizer_step)
        self._scale: float | None = None  # the loss scale then (16-mixed)
        self._validating: Any = None
        self._shares_logger = False

    def __reduce__(self) -> tuple:
        # (ddp_spawn pickles the callbacks: rebuilt in the child for its Lightning package)
        return _rebuilt, (self.settings,)

    # -- the run's life -----------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        clip = getattr(trainer, "gradient_clip_val", None)
        if stage == "fit" and clip and _clips(self.settings.plugins, self.settings.config):
            raise ValueError(
                f"GradlogCallback's grad-clip plugin and Trainer(gradient_clip_val={clip}) would "
                "both clip the gradients (grad-clip first, then Lightning); keep one of them")

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        optimizers = list(trainer.optimizers)
        if len(optimizers) != 1:
            raise ValueError(f"GradlogCallback watches one optimizer; this Trainer has "
                             f"{len(optimizers)} (configure_optimizers)")
        own = self.settings.logdir
        logdir = own if own is not None else self._logger_dir(trainer)
        self._shares_logger = own is None and logdir is not None
        self.run = self.settings.start(pl_module, optimizers[0], logdir=logdir,
                                       state=self._restored)
        self._restored, self._stepped = None, False
        if (self.run.step, self.run.epoch) != (trainer.global_step, trainer.current_epoch):
            # a checkpoint written without this callback, or none: Lightning's count rules
            self.run.driver.jump_to(trainer.global_step, trainer.current_epoch)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(None)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._finish(exception)

    def _finish(self, error: BaseException | None) -> None:
        run, self.run = self.run, None
        if run is None:
            return
        if self._validating is not None:
            self._leave_validation()
        run.finish(error=error)

    @staticmethod
    def _logger_dir(trainer: Any) -> str | None:
        """The ``log_dir`` of the trainer's ``TensorBoardLogger`` (None without one)."""
        package = type(trainer).__module__.split(".trainer")[0]
        tensorboard = importlib.import_module(f"{package}.loggers").TensorBoardLogger
        for logger in trainer.loggers:
            if isinstance(logger, tensorboard):
                return logger.log_dir
        return None

    # -- training -----------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.run is not None:
            self.run.epoch_start()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        if self.run is None:
            return
        if self.run.driver.batch_start(batch) is not batch:
            raise RuntimeError(
                f"GradlogCallback: {', '.join(self.run.replaced_values())} replaced the batch, "
                "which a Lightning callback cannot hand to training_step; such plugins need "
                "gl.watch in your own loop")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.run is None:
            return
        scaler = _loss_scaler(trainer)
        self._scale = scaler.get_scale() if scaler is not None else None
        self._stepped = True
        self.run.driver.gradients_final(optimizer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.run is None or not self._stepped:
            return  # (a micro-batch: its step's batch goes on)
        self._stepped = False
        scaler = _loss_scaler(trainer)
        driver = self.run.driver
        if scaler is not None and self._scale is not None and scaler.get_scale() < self._scale:
            driver.step_skipped()  # the scale only drops when the scaler skipped the step
        else:
            driver.step_end()
        driver.batch_end(_CallbackMetrics(trainer))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.run is not None:
            self.run.epoch_end()

    # -- validation ---------------------------------------------------------------------------
    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self.run is not None and not trainer.sanity_checking:
            self._validating = self.run.validating()
            self._validating.__enter__()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.run is None or self._validating is None:
            return
        self._leave_validation()
        # beside Lightning's TensorBoardLogger the metrics are already in the run
        self.run.validation_end(dict(trainer.callback_metrics), log=not self._shares_logger)

    def _leave_validation(self) -> None:
        validating, self._validating = self._validating, None
        validating.__exit__(None, None, None)

    # -- checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The run's state (step, epoch, plugins' state and generators), its numpy arrays as
        CPU tensors: Lightning's checkpoint then loads with ``torch.load(weights_only=True)``
        (they come back as tensors, which the generators and ``np.asarray`` take)."""
        if self.run is None:
            return {}
        import numpy as np
        import torch
        return map_tensors(self.run.state_dict(), lambda v: isinstance(v, np.ndarray),
                           lambda a: torch.from_numpy(np.array(a)))

    def load_state_dict(self, state_dict: dict) -> None:
        self._restored = dict(state_dict)


class _CallbackMetrics(Mapping):
    """``trainer.callback_metrics``, read when a plugin's ``on_batch_end`` first asks for it:
    Lightning computes it anew at each read (1% of a small model's step), and most steps no
    plugin listens."""

    def __init__(self, trainer: Any) -> None:
        self._trainer = trainer
        self._metrics: dict | None = None

    def _read(self) -> dict:
        if self._metrics is None:
            self._metrics = dict(self._trainer.callback_metrics)
        return self._metrics

    def __getitem__(self, key: str) -> Any:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def _rebuilt(settings: WatchSettings) -> GradlogCallback:
    return GradlogCallback(settings.plugins, settings.logdir, settings.every,
                           strict=settings.strict, config=settings.config,
                           max_failures=settings.max_failures)


def _loss_scaler(trainer: Any) -> Any:
    """The ``16-mixed`` precision's ``GradScaler`` (None for other precisions)."""
    return getattr(trainer.precision_plugin, "scaler", None)


def _clips(plugins: Any, config: Any) -> bool:
    """Whether gradlog's grad-clip plugin is among those enabled (none is imported)."""
    from ..plugin.options import load_config
    cfg = load_config(config) if isinstance(config, str) else dict(config or {})
    return any(name == "grad-clip" for name, _, _ in merge_plugins(plugins, config=cfg))


def _callback_bases() -> tuple[type, ...]:
    """The ``Callback`` class of each Lightning package already imported (a callback made
    from both works with either ``Trainer``), else of the first one that imports."""
    loaded = [sys.modules[p] for p in _PACKAGES if p in sys.modules]
    if not loaded:
        for package in _PACKAGES:
            try:
                loaded = [importlib.import_module(package)]
                break
            except ImportError:
                continue
        else:
            raise ImportError("GradlogCallback needs Lightning: pip install 'gradlog[lightning]' "
                              "(or pytorch_lightning)")
    return tuple(module.Callback for module in loaded)


@functools.cache
def _callback_class(bases: tuple[type, ...]) -> type:
    # NOTE: Lightning checks isinstance(callback, its Callback) and the two packages have two
    # Callback classes, so the class is made for the package(s) in use when it is created.
    return type("GradlogCallback", (GradlogCallback, *bases), {"__module__": __name__})
