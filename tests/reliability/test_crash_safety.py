"""Crash safety of ``gradlog train``: a run killed with SIGKILL at a chosen point (an event, a
step, during validation, around and inside a checkpoint write, inside an event-file flush)
leaves event files TensorBoard reads, every point flushed before the kill, a loadable newest
checkpoint, and ``--resume`` continues to exactly the uninterrupted run: each step once, the
same values. SIGINT/SIGTERM save a checkpoint and flush, then exit 130/143.

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
    SCALAR_TAGS,
    STEPS,
    accumulated,
    event_files,
    loader_entries,
    read_side_log,
    run_driver,
    strict_records,
    text_steps,
    train_args,
)

import gradlog as gl
from gradlog import runs

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Point:
    """Where the run is stopped and what is known about the result."""

    plugin: str | None = None          # -p crash-at:... options
    flush: dict | None = None          # the driver's flush_kill
    ckpt: dict | None = None           # the driver's ckpt_kill
    newest: int | None = None          # newest checkpoint step on disk after the kill
    signal: str = "KILL"
    code: int = -9                     # the killed run's exit status
    extra: dict = field(default_factory=dict)


def at(event: str, step: int = -1, epoch: int = -1, newest: int | None = None,
       signal: str = "KILL", code: int = -9) -> Point:
    return Point(plugin=f"crash-at:event={event},step={step},epoch={epoch},signal={signal}",
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
    extra = ["-p", point.plugin] if point.plugin else []
    crashed = run_driver(spec, train_args(config, "--logdir", run_dir, *extra), plugins)
    snapshot = os.path.join(base, "snapshot")
    shutil.copytree(run_dir, snapshot)
    resumed = run_driver({"sidelog": os.path.join(base, "resume.jsonl"), "run_dir": run_dir},
                         train_args(config, "--resume", run_dir), plugins)
    return Outcome(crashed, snapshot, read_side_log(log), resumed, run_dir)


def _reference(root: str, config: str) -> dict:
    run_dir = os.path.join(root, "reference")
    result = run_driver({"sidelog": os.path.join(root, "reference.jsonl"), "run_dir": run_dir},
                        train_args(config, "--logdir", run_dir), None)
    assert result.returncode == 0, result.stderr
    return accumulated(run_dir)


@pytest.fixture(scope="session")
def outcomes(request, tmp_path_factory, tiny_toml, reliability_plugins):
    """The uninterrupted reference run and every selected point, two child processes at a
    time; each test waits only for its own point."""
    root = str(tmp_path_factory.mktemp("crash"))
    wanted = [item.callspec.params["name"] for item in request.session.items
              if item.module.__name__ == __name__ and hasattr(item, "callspec")
              and "name" in item.callspec.params]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    futures = {"reference": pool.submit(_reference, root, tiny_toml)}
    for name in dict.fromkeys(wanted):
        futures[name] = pool.submit(_scenario, name, POINTS[name], root, tiny_toml,
                                    reliability_plugins)
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def test_reference_run_logs_every_step_once(outcomes):
    reference = outcomes["reference"].result()
    assert [s for s, _ in reference["train/loss"]] == list(range(STEPS))
    assert [s for s, _ in reference["val/loss"]] == [4, 8]


# -- checks shared by every point ---------------------------------------------------------------

def _check_files_read_cleanly(run_dir: str, may_tear: bool) -> None:
    """Every record's CRCs hold, a torn record is only ever the last of a file, both
    TensorBoard loaders read the directory without error."""
    files = event_files(run_dir)
    assert files, f"no event file in {run_dir}"
    for path in files:
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


def _check_values_match_reference(run_dir: str, reference: dict, *, complete: bool,
                                  before: int | None = None) -> None:
    """Every scalar in the run equals the reference's at its step, each step once; with
    ``complete``, every step is there; with ``before``, at least every step < ``before``."""
    found = accumulated(run_dir)
    for tag in SCALAR_TAGS:
        points = found.get(tag, [])
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), f"{tag}: duplicated steps {steps}"
        assert set(points) <= set(reference[tag]), f"{tag}: {points} vs {reference[tag]}"
        if complete:
            assert points == reference[tag], f"{tag}: {points} vs {reference[tag]}"
        elif before is not None:
            want = [(s, v) for s, v in reference[tag] if s < before]
            assert set(want) <= set(points), f"{tag}: lost {sorted(set(want) - set(points))}"


def _check_resume(outcome: Outcome, reference: dict) -> None:
    assert outcome.resumed.returncode == 0, outcome.resumed.stderr
    _check_files_read_cleanly(outcome.run_dir, may_tear=True)
    _check_values_match_reference(outcome.run_dir, reference, complete=True)
    assert text_steps(outcome.run_dir, "config") == [0]
    trials = [d for d in os.scandir(outcome.run_dir) if d.is_dir() and event_files(d.path)]
    assert len(trials) == 1, f"hparams trials: {[d.name for d in trials]}"
    assert [s for s, _ in accumulated(trials[0].path)["hparam/val_loss"]] == [0]
    leftovers = [n for n in os.listdir(outcome.run_dir) if n.startswith(".checkpoint-")]
    assert not leftovers, f"temporary checkpoint files left behind: {leftovers}"


def _stopped_as_planned(outcomes: dict, points: dict, name: str) -> tuple:
    """The point, the outcome of the run stopped there (checked to have exited with the
    point's code) and the uninterrupted reference run's values."""
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
    _check_values_match_reference(outcome.snapshot, reference, complete=False, before=newest)
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
        assert found[tag] == [(s, v) for s, v in reference[tag] if s < newest], tag
    _check_resume(outcome, reference)
