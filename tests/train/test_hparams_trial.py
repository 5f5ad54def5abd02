"""The hparams trial ``gradlog train`` logs into the run itself: the settings' columns come
before the plugins' options in TensorBoard's HParams table, which sorts them by name
(differing ones first); its end status reaches the disk only after everything logged before
it (a resume takes a run whose end status is on disk for a finished one)."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.plugins.hparams import backend_context, metadata, plugin_data_pb2

from gradlog.tensorboard import SummaryWriter
from gradlog.train.config import RunConfig
from gradlog.train.logged import METRIC_TAGS, log_session_end, log_session_start


def _experiment(trial: Path):
    for path in sorted(trial.glob("*tfevents*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == metadata.EXPERIMENT_TAG:
                    return plugin_data_pb2.HParamsPluginData.FromString(
                        value.metadata.plugin_data.content).experiment
    raise AssertionError(f"no experiment in {trial}")


def test_tensorboard_shows_the_settings_before_the_plugin_options(tmp_path):
    config = RunConfig("shapes", {"epochs": 2, "batch_size": 64, "lr": 0.05, "seed": 0},
                       [("grad-clip", {"agc_clipping": 0.01, "max_norm": 1.0, "mode": "norm"}),
                        ("doctor", {"every": 20})])
    with SummaryWriter(str(tmp_path)) as writer:
        log_session_start(writer, config)
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []  # no sub-run
    experiment = _experiment(tmp_path)
    assert [m.name.tag for m in experiment.metric_infos] == list(METRIC_TAGS)
    assert [i.name for i in experiment.hparam_infos] == [
        "example", "epochs", "batch_size", "lr", "seed", "~grad-clip.agc_clipping",
        "~grad-clip.max_norm", "~grad-clip.mode", "~doctor.every"]
    # what TensorBoard does to the columns (differing ones first, then by name): here lr
    # and a plugin option differ between the runs compared
    for info in experiment.hparam_infos:
        info.differs = info.name in ("lr", "~grad-clip.agc_clipping")
    backend_context._sort_and_reduce_to_hparams_limit(experiment)
    assert [i.name for i in experiment.hparam_infos] == [
        "lr", "~grad-clip.agc_clipping", "batch_size", "epochs", "example", "seed",
        "~doctor.every", "~grad-clip.max_norm", "~grad-clip.mode"]


def _tags_on_disk(directory: Path) -> set[str]:
    return {value.tag for path in sorted(directory.glob("*tfevents*"))
            for event in EventFileLoader(str(path)).Load() for value in event.summary.value}


def test_everything_logged_before_the_end_status_is_on_disk_when_it_is_written(tmp_path):
    writer = SummaryWriter(str(tmp_path), max_queue=1000, flush_secs=1000)  # never on its own
    try:
        writer.add_scalar("train/loss", 0.5, 7)
        writer.add_scalars("pair", {"x": 1.0}, 8)  # in a file of its own (run pair_x)
        log_session_end(writer, 8)
        # a process killed now: the end status may not be on disk yet, the rest must be
        assert _tags_on_disk(tmp_path) >= {"train/loss"}
        assert _tags_on_disk(tmp_path / "pair_x") == {"pair"}
    finally:
        writer.close()
    assert metadata.SESSION_END_INFO_TAG in _tags_on_disk(tmp_path)
