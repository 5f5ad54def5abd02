"""Accelerate: ``GradlogTracker``, a tracker for ``Accelerator(log_with=...)``, so that
``accelerator.log(...)`` writes gradlog event files; its writer is also the one ``gl.watch``
logs into, inside the ``accelerator``-prepared loop, so one run holds both.

``gl.watch`` needs nothing Accelerate-specific: the prepared optimizer steps its torch
optimizer only when ``accelerator.sync_gradients`` (the last micro-batch of
``accelerator.accumulate``), after ``accelerator.clip_grad_norm_`` and any loss-scaler
unscaling, and that step's pre-hook is where ``gl.watch`` reads the gradients: once per real
optimizer step, accumulated and unscaled.
"""

from __future__ import annotations

from typing import Any

try:
    from accelerate.tracking import GeneralTracker, on_main_process
except ImportError as error:  # pragma: no cover - the extra is absent
    raise ImportError("gradlog.integrations.accelerate needs Accelerate: "
                      "pip install 'gradlog[accelerate]'") from error

__all__ = ["GradlogTracker"]


class GradlogTracker(GeneralTracker):
    """An Accelerate tracker writing TensorBoard event files with gradlog's ``SummaryWriter``:
    ``Accelerator(log_with=GradlogTracker("runs/exp1"))``, then
    ``accelerator.init_trackers(project, config)`` (the config as hparams),
    ``accelerator.log(values, step)`` (numbers as scalars, strings as text, dicts of numbers
    as ``add_scalars``) and ``accelerator.end_training()`` (the files closed). Only the main
    process writes. ``tracker`` is the writer: pass it to ``gl.watch(model, optimizer,
    writer=tracker.tracker)`` for gradients in the same run.

    Args:
        logdir: the run's directory (default: a new ``runs/<time>_<host>``).
    """

    name = "gradlog"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, logdir: str | None = None) -> None:
        super().__init__()
        self.logdir = logdir
        self.writer: Any = None
        self._last_step = 0  # the hparams session ends there (never below a logged step)

    @on_main_process
    def start(self) -> None:
        from ..plugin.writers import open_writer
        if self.writer is None:
            self.writer = open_writer(self.logdir)
            self.logdir = self.writer.get_logdir()

    @property
    def tracker(self) -> Any:
        """The run's ``gradlog.tensorboard.SummaryWriter`` (None on other processes)."""
        return self.writer

    @on_main_process
    def store_init_configuration(self, values: dict) -> None:
        """The run's configuration, as hyperparameters (TensorBoard's HPARAMS tab): the run
        itself is the trial (no second event file or sub-run), its session ends at
        ``end_training()``."""
        from ..tensorboard.hparams import session_start_summaries

        for summary in session_start_summaries(values, []):
            self.writer.add_summary(summary, 0)
        self.writer.flush()

    def log(self, values: dict, step: int | None = None, **kwargs: Any) -> None:
        """Numbers as scalars, strings as text, dicts of numbers as ``add_scalars``; other
        values are refused with their key and type. Only the process whose tracker started
        (the main one) has a writer; elsewhere this returns at once. It is called every step:
        the check is whether a writer exists, not a new ``PartialState`` per call."""
        writer = self.writer
        if writer is None:
            self._log_before_start()
            return
        for key, value in values.items():
            if isinstance(value, (int, float)) or _is_one_number(value):
                writer.add_scalar(key, value, step)
            elif isinstance(value, str):
                writer.add_text(key, value, step)
            elif isinstance(value, dict):
                writer.add_scalars(key, value, step)
            else:
                raise TypeError(f"GradlogTracker.log: '{key}' is a {type(value).__name__}; "
                                "it logs numbers, strings and dicts of numbers")
            self._last_step = max(self._last_step, step or 0)

    @on_main_process
    def _log_before_start(self) -> None:
        raise RuntimeError("GradlogTracker.log: the tracker has not started; call "
                           "accelerator.init_trackers(...) before accelerator.log(...)")

    @on_main_process
    def finish(self) -> None:
        if self.writer is not None:
            from ..tensorboard.hparams import session_end_summary

            self.writer.add_summary(session_end_summary("success"), self._last_step)
            self.writer.close()


def _is_one_number(value: Any) -> bool:
    numel = getattr(value, "numel", None)  # a tensor of one element, as accelerator.log takes
    return callable(numel) and numel() == 1
