"""Crash safety of ``gradlog train`` with every built-in plugin enabled: a run killed with
SIGKILL at a chosen point (an event, a step, during validation, around and inside a checkpoint
write, inside an event-file flush) leaves event files TensorBoard reads, every point flushed
before the kill, a loadable newest checkpoint, and ``--resume DIR`` (nothing else: the run's
configuration is restored) continues to exactly the uninterrupted run: every tag (scalars,
histograms, images, text, each add_scalars run, the hparams trial) has each step once, with the
same values, in TensorBoard's Python loader (and the classic one agrees). SIGINT/SIGTERM save a
checkpoint and flush, then exit 130/143. The same holds when a finished run is extended with a
larger ``--epochs``, and resuming a finished run writes nothing.

Each kill point runs two child processes (the killed run and the resumed one); the selected
points run two at a time in a pool, started when the first test asks for its result.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
from dataclasses import dataclass, field

import pytest
from reliability_helpers import (
    STEPS,
    accumulated,
    all_plugins_args,
    event_files,
    every_tag,
    loader_entries,
    read_side_log,
    run_driver,
    strict_records,
    text_steps,
)

import gradlog as gl
from gradlog.train import runs

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Point:
    """Where the run is stopped and what is known about the result."""

    plugin: str | None = None          # where crash-at signals (GRADLOG_RELIABILITY_CRASH)
    flush: dict | None = None          # the driver's flush_kill
    ckpt: dict | None = None           # the driver's ckpt_kill
    newest: int | None = None          # newest checkpoint step on disk after the kill
    signal: str = "KILL"
    code: int = -9                     # the killed run's exit status
    extra: dict = field(default_factory=dict)


def at(event: str, step: int = -1, epoch: int = -1, newest: int | None = None,
       signal: str = "KILL", code: int = -9) -> Point:
    return Point(plugin=f"event={event},step={step},epoch={epoch},signal={signal}",
                 newest=newest, signal=signal, code=code)


def ckpt(where: str, nth: int, newest: int | None, after_bytes: int = 0,
         signal: str = "KILL", code: int = -9) -> Point:
    spec = {"where": where, "nth": nth, "after_bytes": after_bytes, "signal": signal}
    return Point(ckpt=spec, newest=newest, signal=signal, code=code)


def flush(nth: int, cut: str, record: int = 0) -> Point:
    # the newest checkpoint depends on how the flushes fall: read from the side log
    return Point(flush={"nth": nth, "cut": cut, "record": record}, newest=-1)


# 2 epochs of 4 steps; checkpoints at steps 4 and 8 (the end of each epoch).
KILL_POINTS = {
    "on_train_start": at("on_train_start"),
    "first_step_on_batch_start": at("on_batch_start", step=0),
    "on_after_backward_step_1": at("on_after_backward", step=1),
    "on_before_optimizer_step_2": at("on_before_optimizer_step", step=2),
    "last_step_of_epoch_on_after_optimizer_step": at("on_after_optimizer_step", step=3),
    "last_step_of_epoch_on_batch_end": at("on_batch_end", step=3),
    "during_validation_epoch_0": at("validation", epoch=0),
    "on_validation_end_epoch_0": at("on_validation_end", epoch=0),
    "on_epoch_end_epoch_0": at("on_epoch_end", epoch=0),
    "right_after_checkpoint_4": ckpt("after_save", 1, newest=4),
    "on_epoch_start_epoch_1": at("on_epoch_start", epoch=1, newest=4),
    "first_step_of_epoch_2_on_batch_start": at("on_batch_start", step=4, newest=4),
    "middle_step_on_batch_end": at("on_batch_end", step=5, newest=4),
    "on_before_optimizer_step_6": at("on_before_optimizer_step", step=6, newest=4),
    "last_step_on_after_backward": at("on_after_backward", step=7, newest=4),
    "during_validation_epoch_1": at("validation", epoch=1, newest=4),
    "on_epoch_end_epoch_1": at("on_epoch_end", epoch=1, newest=4),
    "right_after_checkpoint_8": ckpt("after_save", 2, newest=8),
    "on_train_end": at("on_train_end", newest=8),
    "checkpoint_4_first_byte": ckpt("write", 1, newest=None),
    "checkpoint_4_after_rename": ckpt("after_replace", 1, newest=4),
    "checkpoint_8_mid_temp_file": ckpt("write", 2, newest=4, after_bytes=20_000),
    "checkpoint_8_temp_complete_before_fsync": ckpt("fsync", 2, newest=4),
    "checkpoint_8_just_before_rename": ckpt("replace", 2, newest=4),
    "first_flush_mid_header_record": flush(1, "mid", record=0),
    "second_flush_inside_a_length_field": flush(2, "header", record=3),
    "third_flush_mid_record": flush(3, "mid", record=2),
    "fourth_flush_before_any_byte": flush(4, "before"),
}

# SIGINT/SIGTERM: the run saves a checkpoint (at the step it reached), flushes and exits.
SIGNAL_POINTS = {
    "sigterm_first_step": at("on_batch_start", step=0, signal="TERM", code=143, newest=1),
    "sigint_during_validation": at("validation", epoch=0, signal="INT", code=130, newest=4),
    "sigterm_last_epoch_end": at("on_epoch_end", epoch=1, signal="TERM", code=143, newest=8),
    "sigint_inside_checkpoint_write": ckpt("write", 1, newest=4, after_bytes=1000,
                                           signal="INT", code=130),
}
POINTS = {**KILL_POINTS, **SIGNAL_POINTS}


@dataclass
class Outcome:
    crashed: object      # CompletedProcess of the interrupted run
    snapshot: str        # a copy of the run directory right after it
    side_log: list
    resumed: object      # CompletedProcess of gradlog train --resume
    run_dir: str


def _scenario(name: str, point: Point, root: str, config: str, plugins) -> Outcome:
    base = os.path.join(root, name)
    os.makedirs(base)
    run_dir, log = os.path.join(base, "run"), os.path.join(base, "side.jsonl")
    spec = {"sidelog": log, "run_dir": run_dir, "flush_kill": point.flush,
            "ckpt_kill": point.ckpt}
    crashed = run_driver(spec, all_plugins_args(config, "--logdir", run_dir), plugins,
                         crash=point.plugin)
    snapshot = os.path.join(base, "snapshot")
    shutil.copytree(run_dir, snapshot)
    resumed = run_driver({"sidelog": os.path.join(base, "resume.jsonl"), "run_dir": run_dir},
                         ["--resume", run_dir, "--quiet"], plugins)
    return Outcome(crashed, snapshot, read_side_log(log), resumed, run_dir)


@dataclass
class Reference:
    run_dir: str
    scalars: dict        # accumulated(): {tag: [(step, value)]}
    tags: dict           # every_tag()


def _reference(root: str, config: str, plugins) -> Reference:
    run_dir = os.path.join(root, "reference")
    result = run_driver({"sidelog": os.path.join(root, "reference.jsonl"), "run_dir": run_dir},
                        all_plugins_args(config, "--logdir", run_dir), plugins)
    assert result.returncode == 0, result.stderr
    return Reference(run_dir, accumulated(run_dir), every_tag(run_dir))


@pytest.fixture(scope="session")
def outcomes(request, tmp_path_factory, tiny_toml, reliability_plugins):
    """The uninterrupted reference run and every selected point, two child processes at a
    time; each test waits only for its own point."""
    root = str(tmp_path_factory.mktemp("crash"))
    wanted = [item.callspec.params["name"] for item in request.session.items
              if item.module.__name__ == __name__ and hasattr(item, "callspec")
              and item.callspec.params.get("name") in POINTS]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    futures = {"reference": pool.submit(_reference, root, tiny_toml, reliability_plugins)}
    for name in dict.fromkeys(wanted):
        futures[name] = pool.submit(_scenario, name, POINTS[name], root, tiny_toml,
                                    reliability_plugins)
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def test_reference_run_logs_every_kind_of_tag_of_every_plugin(outcomes):
    reference = outcomes["reference"].result()
    assert [s for s, _ in reference.scalars["train/loss"]] == list(range(STEPS))
    assert [s for s, _ in reference.scalars["val/loss"]] == [4, 8]
    tags = {tag for _, tag in reference.tags}
    for prefix in ("plugins/nan-guard/", "grad-clip/", "grad-noise/", "adversarial/", "grad-norm/",
                   "gradcam/", "lr-monitor/", "activation-stats/", "histogram/grad_raw/",
                   "histogram/weight/", "histogram/activation/", "histogram/update_ratio/"):
        assert any(t.startswith(prefix) for t in tags), prefix
    runs_below = {run for run, _ in reference.tags}
    assert {".", "pair_up", "pair_down", "val_pair_loss"} <= runs_below
    assert "hparams" not in runs_below  # the hparams trial is the run itself
    assert [s for s, _ in reference.tags[(".", "_hparams_/session_start_info")]] == [0]
    assert [s for s, _ in reference.tags[(".", "_hparams_/session_end_info")]] == [8]
    for tag in ("config/text_summary", "model/text_summary"):
        assert reference.tags[(".", tag)][0][0] == 0
    images = [t for r, t in reference.tags if r == "." and t.startswith("gradcam/conv")]
    assert images and [s for s, _ in reference.tags[(".", images[0])]] == [0, 3, 4, 6, 8]


# -- checks shared by every point ---------------------------------------------------------------

def _check_files_read_cleanly(run_dir: str, may_tear: bool) -> None:
    """Every record's CRCs hold, a torn record is only ever the last of a file, both
    TensorBoard loaders read the directory and each run below it without error."""
    assert event_files(run_dir), f"no event file in {run_dir}"
    for root, _, _ in os.walk(run_dir):
        for path in event_files(root):
            _, torn = strict_records(path)
            assert torn == 0 or may_tear, f"{path} ends in a torn record ({torn} bytes)"
            loader_entries(path)  # EventFileLoader: must not raise
    accumulated(run_dir)      # EventAccumulator: must not raise


def _check_flushed_points_survived(outcome: Outcome) -> None:
    flushed: dict[str, set] = {}
    for e in outcome.side_log:
        if "file" in e and not e["tag"].startswith("<"):
            flushed.setdefault(e["file"], set()).add((e["tag"], e["step"], e["value"]))
    for name, entries in flushed.items():
        on_disk = loader_entries(os.path.join(outcome.snapshot, name))
        missing = entries - on_disk
        assert not missing, f"flushed before the kill but not read back: {sorted(missing)[:5]}"


def _newest_checkpoint_step(outcome: Outcome) -> int | None:
    """What the side log says: the last checkpoint whose save returned, or one that was
    renamed into place when the kill came."""
    newest = None
    for e in outcome.side_log:
        if "checkpoint" in e:
            newest = e["step"]
        if e.get("where") == "after_replace":
            newest = int(e["renamed"].split("-")[1].split(".")[0])
    return newest


def _check_checkpoints(outcome: Outcome, point: Point) -> int | None:
    expected = _newest_checkpoint_step(outcome) if point.newest == -1 else point.newest
    assert _newest_checkpoint_step(outcome) == expected
    path = runs.newest_checkpoint(outcome.snapshot)
    if expected is None:
        assert path is None
        return None
    assert os.path.basename(path) == f"checkpoint-{expected:08d}.npz"
    state = gl.load(path)  # loads, without pickle
    assert state["format"] == runs.CHECKPOINT_FORMAT and state["step"] == expected
    for _, other in runs.checkpoints(outcome.snapshot):  # a checkpoint name is never partial
        runs.load_checkpoint(other)
    return expected


def _check_against_reference(run_dir: str, reference: Reference, *, complete: bool,
                             before: int | None = None) -> None:
    """Every tag of every run in ``run_dir`` has each step once, with the reference's values
    (timings: the same steps); with ``complete``, exactly the reference's tags and points;
    with ``before``, at least every point at a step < ``before``."""
    found = every_tag(run_dir)
    for key, points in found.items():
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), f"{key}: duplicated steps {steps}"
        assert key in reference.tags, f"{key} is not in the reference"
        expected = reference.tags[key]
        stray = [p for p in points if p not in expected]
        assert not stray, f"{key}: steps {[s for s, _ in stray]} differ from the reference"
        if complete:
            assert points == expected, f"{key}: {steps} vs {[s for s, _ in expected]}"
        elif before is not None:
            lost = [s for s, v in expected if s < before and (s, v) not in points]
            assert not lost, f"{key}: lost steps {lost}"
    if complete:
        assert set(found) == set(reference.tags), sorted(set(found) ^ set(reference.tags))


def _check_resume(outcome: Outcome, reference: Reference) -> None:
    assert outcome.resumed.returncode == 0, outcome.resumed.stderr
    _check_files_read_cleanly(outcome.run_dir, may_tear=True)
    _check_against_reference(outcome.run_dir, reference, complete=True)
    assert text_steps(outcome.run_dir, "config") == [0]
    leftovers = [n for n in os.listdir(outcome.run_dir) if n.startswith(".checkpoint-")]
    assert not leftovers, f"temporary checkpoint files left behind: {leftovers}"


def _stopped_as_planned(outcomes: dict, points: dict, name: str) -> tuple:
    """The point, the outcome of the run stopped there (checked to have exited with the
    point's code) and the uninterrupted reference run."""
    point = points[name]
    outcome = outcomes[name].result()
    assert outcome.crashed.returncode == point.code, outcome.crashed.stderr
    return point, outcome, outcomes["reference"].result()


@pytest.mark.parametrize("name", KILL_POINTS)
def test_sigkill_loses_nothing_flushed_and_resume_repeats_no_step(outcomes, name):
    point, outcome, reference = _stopped_as_planned(outcomes, KILL_POINTS, name)
    kills = [e for e in outcome.side_log if "kill" in e]
    assert len(kills) == 1, kills  # it died exactly where asked
    if point.plugin:
        assert point.plugin.split("event=")[1].split(",")[0] == kills[0]["event"]
    _check_files_read_cleanly(outcome.snapshot, may_tear=True)
    _check_flushed_points_survived(outcome)
    newest = _check_checkpoints(outcome, point)
    # a checkpoint implies the events before it are on disk (the resume purges the rest)
    _check_against_reference(outcome.snapshot, reference, complete=False, before=newest)
    _check_resume(outcome, reference)


@pytest.mark.parametrize("name", SIGNAL_POINTS)
def test_sigint_and_sigterm_checkpoint_flush_and_exit(outcomes, name):
    point, outcome, reference = _stopped_as_planned(outcomes, SIGNAL_POINTS, name)
    assert "checkpoint saved" in outcome.crashed.stderr
    assert f"--resume {outcome.run_dir}" in outcome.crashed.stderr
    _check_files_read_cleanly(outcome.snapshot, may_tear=False)  # flushed and closed
    newest = _check_checkpoints(outcome, point)
    # everything logged is on disk: exactly the reference up to the checkpoint's step
    found = accumulated(outcome.snapshot)
    for tag in ("train/loss", "train/acc", "train/lr"):
        assert found[tag] == [(s, v) for s, v in reference.scalars[tag] if s < newest], tag
    _check_against_reference(outcome.snapshot, reference, complete=False, before=newest)
    _check_resume(outcome, reference)


# -- a finished run, and one extended by a larger --epochs -------------------------------------

def _snapshot(run_dir: str) -> dict[str, bytes]:
    out = {}
    for root, _, files in os.walk(run_dir):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out[os.path.relpath(os.path.join(root, name), run_dir)] = f.read()
    return out


def test_resuming_a_finished_run_writes_nothing(outcomes, tmp_path, reliability_plugins):
    reference = outcomes["reference"].result()
    run_dir = str(tmp_path / "run")
    shutil.copytree(reference.run_dir, run_dir)
    before = _snapshot(run_dir)
    result = run_driver({"sidelog": str(tmp_path / "side.jsonl"), "run_dir": run_dir},
                        ["--resume", run_dir], reliability_plugins)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (f"{run_dir}: already finished at epoch 2; nothing to do (give "
                             "--epochs N with N > 2 to train it further)\n")
    assert _snapshot(run_dir) == before


EXTENDED = ["--epochs", "3"]
# The finished reference run, extended to 3 epochs (steps 8..11, checkpoint 12), stopped in
# the extension; then resumed with the arguments given (the SIGTERM checkpoint records 3).
EXTEND_POINTS = {
    "extend_sigkill_mid_epoch_3": (at("on_batch_end", step=9, newest=8), EXTENDED),
    "extend_sigkill_during_validation_3": (at("validation", epoch=2, newest=8), EXTENDED),
    "extend_sigterm_mid_epoch_3": (at("on_batch_start", step=10, signal="TERM", code=143,
                                      newest=11), []),
    "extend_sigkill_after_the_last_checkpoint": (ckpt("after_save", 1, newest=12), []),
}


def _extension(root: str, name: str, reference, plugins, point=None, resume=()) -> Outcome:
    base = os.path.join(root, name)
    run_dir = os.path.join(base, "run")
    shutil.copytree(reference.result().run_dir, run_dir)
    spec = {"sidelog": os.path.join(base, "side.jsonl"), "run_dir": run_dir,
            "ckpt_kill": point.ckpt if point else None}
    extended = run_driver(spec, ["--resume", run_dir, *EXTENDED, "--quiet"], plugins,
                          crash=point.plugin if point else None)
    snapshot = os.path.join(base, "snapshot")
    shutil.copytree(run_dir, snapshot)
    resumed = None
    if point is not None:
        resumed = run_driver({"sidelog": os.path.join(base, "resume.jsonl"),
                              "run_dir": run_dir}, ["--resume", run_dir, *resume, "--quiet"],
                             plugins)
    return Outcome(extended, snapshot, read_side_log(spec["sidelog"]), resumed, run_dir)


@pytest.fixture(scope="session")
def extensions(outcomes, tmp_path_factory, reliability_plugins):
    """The uninterrupted extension (the reference of the others) and each stopped one."""
    root = str(tmp_path_factory.mktemp("extend"))
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    futures = {"reference": pool.submit(_extension, root, "reference", outcomes["reference"],
                                        reliability_plugins)}
    for name, (point, resume) in EXTEND_POINTS.items():
        futures[name] = pool.submit(_extension, root, name, outcomes["reference"],
                                    reliability_plugins, point, resume)
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def _extended_reference(extensions) -> Reference:
    outcome = extensions["reference"].result()
    assert outcome.crashed.returncode == 0, outcome.crashed.stderr
    return Reference(outcome.run_dir, accumulated(outcome.run_dir), every_tag(outcome.run_dir))


def test_extending_a_finished_run_keeps_its_epochs_and_adds_one(outcomes, extensions):
    first, extended = outcomes["reference"].result(), _extended_reference(extensions)
    assert [s for s, _ in extended.scalars["train/loss"]] == list(range(12))
    assert [s for s, _ in extended.scalars["val/loss"]] == [4, 8, 12]
    for key, points in first.tags.items():
        if key == (".", "_hparams_/session_end_info"):  # written after the last checkpoint:
            assert [s for s, _ in extended.tags[key]] == [12]  # hidden, then written anew
            continue
        assert [p for p in extended.tags[key] if p[0] < 8] == \
            [p for p in points if p[0] < 8], key
        assert all(p in extended.tags[key] for p in points), key  # the epoch end at 8 too


@pytest.mark.parametrize("name", EXTEND_POINTS)
def test_an_extension_stopped_anywhere_resumes_to_the_uninterrupted_extension(extensions,
                                                                               name):
    point, _ = EXTEND_POINTS[name]
    outcome = extensions[name].result()
    assert outcome.crashed.returncode == point.code, outcome.crashed.stderr
    newest = runs.newest_checkpoint(outcome.snapshot)
    assert os.path.basename(newest) == f"checkpoint-{point.newest:08d}.npz"
    reference = _extended_reference(extensions)
    _check_resume(outcome, reference)
    if name == "extend_sigkill_after_the_last_checkpoint":  # not "already finished": its
        # trial was left open; resumed (quiet), it trains nothing and ends it (checked above)
        assert outcome.resumed.stdout == \
            f"view the run:  tensorboard --logdir {outcome.run_dir}\n"
