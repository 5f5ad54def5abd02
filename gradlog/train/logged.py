"""What ``gradlog train`` logs besides the per-step metrics: the configuration and the model as
text when a run starts, and the run as one hparams trial (its session starts with the run, its
end status comes at the end)."""

from __future__ import annotations

from typing import Any

from ..plugin.model_text import MODEL_TEXT_TAG, model_text
from .config import RunConfig

__all__ = ["log_start_texts", "log_session_start", "log_session_end", "session_left_open",
           "flat_config", "METRIC_TAGS"]

#: The run's own scalars the HParams table shows (each one's last value): no copies.
METRIC_TAGS = ("val/acc", "val/loss", "train/acc", "train/loss")


def flat_config(config: RunConfig) -> dict[str, Any]:
    """``{"example": ..., "lr": ..., "grad-clip.max_norm": ...}``: settings, then each plugin's
    options, as single values."""
    flat: dict[str, Any] = {"example": config.example, **config.settings}
    for name, opts in config.plugins:
        flat.update({f"{name}.{k}": v for k, v in opts.items()})
    return flat


def log_start_texts(run: Any, config: RunConfig, model: Any) -> None:
    """The ``config`` and ``model`` texts (see gradlog.plugin.model_text), at step 0."""
    rows = [f"| {k} | {v} |" for k, v in flat_config(config).items()]
    run.log_text("config", "| option | value |\n|---|---|\n" + "\n".join(rows), 0)
    run.log_text(MODEL_TEXT_TAG, model_text(model), 0)


# TensorBoard's HParams table sorts its columns by name (those that differ between the runs
# first): a plugin option's name starts with "~", after every letter, so that the training
# settings come first.
PLUGIN_HPARAM_PREFIX = "~"


def hparam_values(config: RunConfig) -> dict[str, Any]:
    """The trial's hyperparameters: the settings, then each plugin's options as
    ``~plugin.option`` (single values only)."""
    flat = flat_config(config)
    settings = {"example", *config.settings}
    return {(k if k in settings else PLUGIN_HPARAM_PREFIX + k): v for k, v in flat.items()
            if isinstance(v, (int, float, str, bool))}


def log_session_start(writer: Any, config: RunConfig) -> None:
    """The run as an hparams trial, at step 0 of the run itself (no sub-run): the experiment
    (hparams, :data:`METRIC_TAGS`) and the session start, written when a run starts (a
    resumed run keeps the ones its first session wrote)."""
    from ..tensorboard.hparams import session_start_summaries

    for summary in session_start_summaries(hparam_values(config), METRIC_TAGS):
        writer.add_summary(summary, 0)


def log_session_end(writer: Any, step: int, status: str = "success") -> None:
    """The trial's end status, at the run's last step (never lower than what it logged),
    written once everything the run logged before it is flushed: an end status on disk means
    nothing the run logged is missing (a resume takes it for a finished run)."""
    from ..tensorboard.hparams import session_end_summary

    writer.flush()
    writer.add_summary(session_end_summary(status), step)


def session_left_open(run_dir: str) -> bool:
    """Whether TensorBoard shows the run's trial started but not ended: the process was
    stopped after the last checkpoint of a run whose training had finished, before its end
    status reached the disk. (A run whose trial is elsewhere, as in an ``hparams`` sub-run of
    older versions, has no session start of its own: nothing is left open.)"""
    from tensorboard.plugins.hparams import metadata

    from ..tensorboard.replay import shown_steps

    shown = shown_steps(run_dir, (metadata.SESSION_START_INFO_TAG,
                                  metadata.SESSION_END_INFO_TAG))
    return bool(shown[metadata.SESSION_START_INFO_TAG]) and \
        not shown[metadata.SESSION_END_INFO_TAG]
