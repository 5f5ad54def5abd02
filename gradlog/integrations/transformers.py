"""Hugging Face Transformers: ``GradlogCallback``, gradlog's plugins in a ``Trainer``.

The Trainer runs its own loop, so the callback drives its run's step driver (``watch_driven``)
from the Trainer's callback events:

* ``on_train_begin``: the run starts with ``model`` and ``optimizer`` (the optimizer under
  Accelerate's wrapper), at ``state.global_step`` (a resumed checkpoint's).
* ``on_step_begin`` and ``on_substep_end``: a micro-batch is due; the model's next training
  forward starts it with its keyword arguments (the Trainer's dict batch), so plugins that
  probe or replace the batch get it. With ``gradient_accumulation_steps`` each micro-batch is
  one more batch of the same step.
* ``on_pre_optimizer_step``: the gradients are final: accumulated, unscaled, and already
  clipped by the Trainer (``max_grad_norm``, default 1.0); the Trainer's pre-clip norm is its
  logged ``grad_norm``.
* ``on_optimizer_step``: the step is done (or skipped by a loss scaler); ``on_step_end``: the
  batch ends and the run's step becomes ``state.global_step``.
* ``on_log`` and ``on_evaluate``: the Trainer's values, at ``state.global_step`` under the
  Trainer's own TensorBoard tags (``train/grad_norm``, ``eval/loss``).
* ``on_train_end`` ends the run.
"""

from __future__ import annotations

import os
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as error:  # pragma: no cover - the extra is absent
    raise ImportError("gradlog.integrations.transformers needs Hugging Face Transformers: "
                      "pip install 'gradlog[transformers]'") from error

from ..plugin.watch import WatchSettings
from ..utils.run_hooks import RunHook

__all__ = ["GradlogCallback", "DEFAULT_PLUGINS"]

# observers only: a callback added to see the gradients changes no step
DEFAULT_PLUGINS = ("histogram", "grad-norm")


class GradlogCallback(TrainerCallback):
    """A ``TrainerCallback`` that runs gradlog's plugins on the Trainer's model and optimizer
    and logs to TensorBoard.

    Gradients are read in ``on_pre_optimizer_step``: accumulated over
    ``gradient_accumulation_steps`` and **after the Trainer's own clipping** (``max_grad_norm``);
    the norm before clipping is the Trainer's ``grad_norm``, logged as ``train/grad_norm``.

    Args:
        plugins: ``-p``-style strings (``"grad-norm:every=10"``), plugin classes or instances.
        logdir: where to write; default: the Trainer's TensorBoard directory
            (``args.logging_dir`` where the installed Transformers has it, else
            ``TENSORBOARD_LOGGING_DIR``, which Transformers 5 reads), else a new
            ``<output_dir>/runs/<time>_<host>``.
        every: how often (optimizer steps) the plugins named in ``plugins`` log, unless their
            string sets its own ``every``.
        strict, config, max_failures: as in ``gl.watch``.

    Under data-parallel training every process runs the plugins and only the main process
    (rank 0) writes. ``settings`` holds the arguments (``WatchSettings``); ``run`` is the
    running ``gradlog.plugin.Run`` (None outside ``train``).
    If ``train`` raises, what was written stays readable (flushed at exit, or by ``close()``).
    """

    def __init__(self, plugins: Any = DEFAULT_PLUGINS, logdir: str | None = None,
                 every: int | None = 100, *, strict: bool = False, config: Any = None,
                 max_failures: int = 3) -> None:
        self.settings = WatchSettings(plugins, logdir, every, strict, config, max_failures)
        self.run: Any = None
        self._shares_trainer_dir = False
        self._due = False  # a micro-batch starts at the model's next training forward
        self._scale: float | None = None  # the loss scale before the step (fp16)
        self._hook: Any = None

    # -- the run's life -----------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, *, model: Any = None,
                       optimizer: Any = None, **kwargs: Any) -> None:
        self.close()  # (a previous train() of this callback that raised)
        logdir, self._shares_trainer_dir = self._trainer_dir(args)
        self.run = self.settings.start(model, optimizer, logdir=logdir)
        if state.global_step:
            self.run.driver.jump_to(state.global_step, int(state.epoch or 0))
        self._hook = model.register_forward_pre_hook(RunHook(self._forward, "gradlog_batch"),
                                                     with_kwargs=True)
        self._due = False

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()

    def close(self) -> None:
        """End the run (``on_train_end`` does it): its hooks removed, its files closed."""
        run, self.run = self.run, None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if run is not None:
            run.finish()

    def _trainer_dir(self, args: Any) -> tuple[str | None, bool]:
        """Where to write, and whether the Trainer's own TensorBoard callback writes there."""
        if self.settings.logdir is not None:
            return self.settings.logdir, False
        tensorboard = "tensorboard" in _report_to(args)
        logging_dir = getattr(args, "logging_dir", None)  # (Transformers 4)
        if logging_dir is None:
            logging_dir = os.getenv("TENSORBOARD_LOGGING_DIR")
        if logging_dir is not None:
            return os.path.expanduser(logging_dir), tensorboard
        return None if args.output_dir is None else _new_dir(args.output_dir), False

    # -- training -----------------------------------------------------------------------------
    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            self.run.epoch_start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._due = self.run is not None

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._due = self.run is not None

    def _forward(self, module: Any, args: tuple, kwargs: dict) -> Any:
        """The model's first training forward of a due micro-batch starts it, with its batch:
        the keyword arguments (``model(**inputs)``), else the positional ones."""
        run = self.run
        if (not self._due or run is None or run.phase != "train" or not module.training
                or not run.engine.is_grad_enabled()):
            return None
        self._due = False
        batch = kwargs if kwargs or not args else args if len(args) != 1 else args[0]
        new = run.driver.batch_start(batch)
        if new is batch:
            return None
        if batch is kwargs:
            return args, dict(new)
        return (tuple(new) if isinstance(new, tuple) else (new,)), kwargs

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, *,
                              optimizer: Any = None, **kwargs: Any) -> None:
        if self.run is None:
            return
        scaler = _loss_scaler(optimizer)
        self._scale = scaler.get_scale() if scaler is not None else None
        self.run.driver.gradients_final(self.run.engine.local_optimizer(optimizer))

    def on_optimizer_step(self, args: Any, state: Any, control: Any, *, optimizer: Any = None,
                          **kwargs: Any) -> None:
        if self.run is None:
            return
        # The loss scaler skipped the step iff it lowered its scale (inf or NaN gradients).
        # (Not Accelerate's ``step_was_skipped``: with torch's AdamW, which takes the scaler
        # into its own step, the scaler calls ``step`` even when it skips, and that says False.)
        scaler = _loss_scaler(optimizer)
        if scaler is not None and self._scale is not None and scaler.get_scale() < self._scale:
            self.run.driver.step_skipped()
        else:
            self.run.driver.step_end()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            self.run.driver.batch_end()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            self.run.epoch_end()

    # -- the Trainer's values ---------------------------------------------------------------
    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None,
               **kwargs: Any) -> None:
        if self.run is None or self._shares_trainer_dir:
            return  # (beside the Trainer's TensorBoard callback they are already there)
        for tag, value in _trainer_tags(logs or {}).items():
            self.run.log_scalar(tag, value, step=state.global_step, metric=False)

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict | None = None,
                    **kwargs: Any) -> None:
        if self.run is None:
            return
        if not self._shares_trainer_dir:
            for tag, value in _trainer_tags(metrics or {}).items():
                self.run.log_scalar(tag, value, step=state.global_step, metric=False)
        self.run.validation_end(dict(metrics or {}), log=False)  # (the plugins hear of them)


def _trainer_tags(logs: dict) -> dict[str, float]:
    """The numbers of a Trainer log under the tags its TensorBoard callback gives them
    (``eval_loss`` -> ``eval/loss``, ``grad_norm`` -> ``train/grad_norm``)."""
    tags = {}
    for key, value in logs.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        for prefix in ("eval", "test"):
            if key.startswith(prefix + "_"):
                tags[f"{prefix}/{key[len(prefix) + 1:]}"] = float(value)
                break
        else:
            tags[f"train/{key}"] = float(value)
    return tags


def _loss_scaler(optimizer: Any) -> Any:
    """The fp16 loss scaler of Accelerate's prepared optimizer (None without one)."""
    return getattr(optimizer, "scaler", None)


def _report_to(args: Any) -> list[str]:
    report_to = getattr(args, "report_to", None) or []
    report_to = [report_to] if isinstance(report_to, str) else list(report_to)
    return ["tensorboard"] if "all" in report_to else report_to


def _new_dir(output_dir: str) -> str:
    """``<output_dir>/runs/<time>_<host>``, named as the Trainer's TensorBoard callback names
    its default directory."""
    from transformers.integrations.integration_utils import default_logdir
    return os.path.join(output_dir, default_logdir())
