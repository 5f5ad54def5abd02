"""What ``gradlog train`` logs besides the per-step metrics: the configuration and the model as
text when a run starts, and one hparams trial when it ends."""

from __future__ import annotations

import os
from typing import Any

from .. import storage
from ..plugin.model_text import MODEL_TEXT_TAG, model_text
from ..plugin.writers import open_writer
from . import runs
from .config import RunConfig

__all__ = ["log_start_texts", "log_hparams", "flat_config"]


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


def log_hparams(run_dir: str, config: RunConfig, metrics: dict) -> None:
    """One trial in ``run_dir/hparams``, at step 0: a run resumed after it was logged logs it
    again and hides the earlier copy (purge at step 0), so there is always one trial."""
    hparams = hparam_values(config)
    trial = storage.join(run_dir, "hparams")
    with open_writer(trial, purge_step=0 if runs.has_events(trial) else None) as writer:
        writer.add_hparams(hparams, {f"hparam/{k.replace('/', '_')}": v
                                     for k, v in metrics.items()}, run_name=".")
    if not storage.is_url(trial):  # (at a URL, closing uploaded them)
        _fsync_event_files(storage.local_path(trial))  # on disk before the next checkpoint


def _fsync_event_files(directory: str) -> None:
    """The trial's files are closed by now (``add_hparams`` closes its own): fsync them by
    name, and the directory that holds their names."""
    for name in os.listdir(directory):
        if "tfevents" in name:
            storage.fsync_file(os.path.join(directory, name))
    storage.fsync_directory(directory)
