"""A failing rank stops every rank (no rank is left waiting in a collective), the failing rank
is named, and what rank 0 logged before stays readable: an exception on rank 1 (gradlog's
handler names it and aborts the job, exit 1) or a SIGKILL of rank 1 (the MPI launcher notices,
names it and ends the others). The launch's timeout bounds the time; the launcher kills the
job's process group if it is ever exceeded."""

from __future__ import annotations

import pytest
from dist_launch import mpi
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_a_failing_rank_stops_every_rank_and_is_named(mode, tmp_path):
    logdir = tmp_path / "logs"
    done = mpi(2, "fail", str(tmp_path), str(logdir), mode, timeout=60)
    # neither rank finished its 50 steps: both were stopped
    assert not (tmp_path / "rank0.json").exists() and not (tmp_path / "rank1.json").exists()
    if mode == "raise":
        assert done.returncode == 1
        assert "RuntimeError: injected failure" in done.stderr
        assert ("gradlog.distributed: rank 1 of 2 failed (RuntimeError: injected failure); "
                "stopping every rank") in done.stderr
    else:
        assert "[0]1:Return code = 0, signaled with Killed" in done.stderr  # rank 1
        assert "[0]0:Return code" in done.stderr  # rank 0 was ended by the launcher
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == list(range(len(steps))) and len(steps) >= 3  # flushed before the failure
