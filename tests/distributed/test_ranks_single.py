"""Rank awareness in a one-process run (what every run is without a process group), and the
errors of the distributed API before any process group exists. The multi-process behaviour is
in the other test files of this folder."""

from __future__ import annotations

import numpy as np
import pytest
from gradlog_plugins.grad_norm import GradNorm
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import gradlog as gl
import gradlog.distributed as dist
from gradlog import nn
from gradlog.engines import Collectives
from gradlog.testing import PluginHarness, tiny_model


def _load(path) -> EventAccumulator:
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def test_one_process_is_rank_0_of_1_and_collectives_return_its_own_values():
    ranks = Collectives()
    assert (ranks.rank, ranks.world_size) == (0, 1)
    for op in ("mean", "sum", "max", "min"):
        assert ranks.all_reduce([3, 4], op).tolist() == [3, 4]
    assert ranks.all_reduce([3, 4], "mean").dtype == np.float64
    assert [a.tolist() for a in ranks.all_gather(np.array([1, 2]))] == [[1, 2]]
    assert ranks.broadcast_text("runs/exp1") == "runs/exp1"
    with pytest.raises(ValueError, match=r"unknown reduction 'median'; accepted: mean, sum, "
                                         r"max, min"):
        ranks.all_reduce([1], "median")
    with pytest.raises(ValueError, match=r"src=1 is not a rank of this run \(rank 0 only\)"):
        ranks.broadcast([1], src=1)


def test_a_watched_run_without_a_process_group_writes_as_before(tmp_path):
    model = tiny_model()
    opt = gl.optim.SGD(model.parameters(), lr=0.1)
    x, y = gl.randn(4, 1, 16, 16), gl.tensor([0, 1, 2, 3])
    with gl.watch(model, opt, logdir=str(tmp_path),
                  plugins=["grad-norm:every=1,per_rank=true"]) as run:
        assert (run.rank, run.world_size) == (0, 1)
        for _ in range(3):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            run.log_scalar("train/loss", loss, reduce="mean")
        with pytest.raises(ValueError, match=r"log_scalar: reduce must be one of mean, sum, "
                                             r"max, min or None, got 'median'"):
            run.log_scalar("x", 1.0, reduce="median")
    main, own = _load(tmp_path), _load(tmp_path / "rank0")
    assert [e.step for e in main.Scalars("train/loss")] == [0, 1, 2]
    # alone, the rank's own raw gradients are the run's gradients
    for tag in ("grad-norm/global", "grad-norm/0", "grad-norm/7"):
        assert [e.value for e in own.Scalars(tag)] == pytest.approx(
            [e.value for e in main.Scalars(tag)], rel=1e-6)
    assert "train/loss" not in own.Tags()["scalars"]


def test_per_rank_values_without_a_run_directory_warn_once_and_are_dropped():
    h = PluginHarness(GradNorm, every=1, per_rank=True)
    with pytest.warns(RuntimeWarning, match="per-rank values are not logged"):
        h.run(steps=2)
    assert h.scalars("grad-norm/global").steps == [0, 1]  # the run's own are unaffected


def test_the_distributed_api_names_what_is_missing_before_init():
    assert not dist.is_initialized()
    for call in (dist.get_rank, dist.get_world_size, dist.barrier,
                 lambda: dist.all_reduce(gl.ones(1)),
                 lambda: nn.parallel.DistributedDataParallel(nn.Linear(2, 2))):
        with pytest.raises(ValueError, match=r"Default process group has not been "
                                             r"initialized, please make sure to call "
                                             r"init_process_group\."):
            call()
    with pytest.raises(ValueError, match=r"supports backend='mpi' only, got 'gloo'"):
        dist.init_process_group("gloo")
    with pytest.raises(ValueError, match=r"init_process_group: timeout is not supported by "
                                         r"the MPI backend"):
        dist.init_process_group("mpi", timeout=30)
    assert not dist.is_initialized()


def test_the_verdict_names_the_rank_that_was_killed_not_the_peers_it_took_down():
    from gradlog.train.launch import verdict
    # rank 1 killed; rank 0 then lost its connection and exited 1 before it could report
    assert verdict(2, {}, {0: "status 1", 1: "signal SIGKILL"}) == \
        (1, "rank 1 of 2 was killed by SIGKILL; every rank was stopped")
    # no signal: every rank that ended without reporting is named
    assert verdict(3, {2: (0, "")}, {0: "status 1", 1: "status 2"}) == \
        (1, "rank 0 of 3 exited with status 1; rank 1 of 3 exited with status 2; "
            "every rank was stopped")
    assert verdict(2, {0: (1, "ValueError: bad"), 1: (1, "peer gone")}, {}) == \
        (1, "rank 0 of 2 failed: ValueError: bad; every rank was stopped")
    assert verdict(2, {0: (143, ""), 1: (143, "")}, {}) == \
        (143, "interrupted (SIGTERM); every rank stopped")
    assert verdict(2, {0: (0, ""), 1: (0, "")}, {}) == (0, "")


def test_rank_sub_runs_sit_inside_the_run_directory_for_paths_and_urls(tmp_path):
    from gradlog.plugin.ranks import rank_run_dir
    assert rank_run_dir(str(tmp_path), 1) == str(tmp_path / "rank1")
    assert rank_run_dir("s3://bucket/runs/a", 3) == "s3://bucket/runs/a/rank3"
    assert rank_run_dir("memory://runs/a/", 0) == "memory://runs/a/rank0"


def test_nproc_without_mpi_is_a_user_error_that_writes_nothing(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from gradlog.cli import main
    monkeypatch.setattr(dist, "is_available", lambda: False)  # as without the mpi extra
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", "--nproc", "2", "--epochs", "1", "-q",
                                       "--logdir", str(run_dir)])
    assert result.exit_code == 2
    assert result.output.strip().endswith(
        "error: --nproc trains gradlog models over MPI, which is not installed: "
        "pip install 'gradlog[mpi]'")
    assert not run_dir.exists()
