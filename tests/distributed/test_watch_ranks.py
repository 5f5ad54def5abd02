"""``gl.watch`` on a two-process DistributedDataParallel model, for gradlog over MPI
(``mpiexec -n 2``) and PyTorch over gloo (``torchrun --nproc-per-node 2``): rank 0 alone
writes the run, which reads as the same training in one process at the global batch would
(same tags, same values, ``train/loss`` the cross-rank mean); ``per_rank=true`` adds
``rank<k>/`` sub-runs with each rank's own raw gradient norms; mutators decide on the averaged
gradients, so a NaN on one rank makes every rank skip the step and the replicas stay equal."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dist_launch import mpi, torchrun
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

pytestmark = pytest.mark.slow

NAN_STEP = 3


@pytest.fixture(scope="module", params=["gradlog", "torch"])
def watched(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    logdir = out / "logs"
    if request.param == "gradlog":
        done = mpi(2, "watch", str(out), str(logdir))
    else:
        done = torchrun(2, "torch_watch", str(out), str(logdir))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.results(out, 2), logdir


def _load(path) -> EventAccumulator:
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def _series(acc: EventAccumulator, tag: str) -> tuple[list[int], list[float]]:
    events = acc.Scalars(tag)
    return [e.step for e in events], [e.value for e in events]


def _event_files(path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith("events.out.tfevents"))


def test_run_knows_its_rank_and_world_size(watched):
    results, _ = watched
    for rank, seen in enumerate(results):
        assert (seen["plain"]["rank"], seen["plain"]["world_size"]) == (rank, 2)


def test_rank0_alone_writes_and_the_logdir_reads_as_one_process(watched):
    _, logdir = watched
    plain = logdir / "plain"
    assert len(_event_files(plain)) == 1 and not [p for p in plain.iterdir() if p.is_dir()]
    run, single = _load(plain), _load(logdir / "single")
    for kind in ("scalars", "histograms"):
        assert sorted(run.Tags()[kind]) == sorted(single.Tags()[kind])
    for tag in ("train/loss", "grad-norm/global", "grad-norm/0", "grad-clip/norm_before",
                "nan-guard/skipped", "grad-noise/std"):
        steps, values = _series(run, tag)
        ref_steps, ref_values = _series(single, tag)
        assert steps == ref_steps
        np.testing.assert_allclose(values, ref_values, rtol=2e-6, equal_nan=True)
    assert _series(run, "train/loss")[0] == list(range(6))
    assert math.isnan(_series(run, "train/loss")[1][NAN_STEP])


def test_train_loss_is_the_mean_of_the_ranks_losses(watched):
    results, logdir = watched
    _, logged = _series(_load(logdir / "plain"), "train/loss")
    means = (np.array(results[0]["plain"]["losses"]) + results[1]["plain"]["losses"]) / 2
    np.testing.assert_allclose(logged, means, rtol=1e-6, equal_nan=True)


def test_a_nan_on_one_rank_makes_every_rank_skip_and_the_replicas_stay_equal(watched):
    results, _ = watched
    r0, r1 = results[0]["plain"], results[1]["plain"]
    assert math.isnan(r1["losses"][NAN_STEP]) and not math.isnan(r0["losses"][NAN_STEP])
    assert r0["skipped"] == r1["skipped"] == results[0]["single"]["skipped"] == 1
    assert r0["clip_window"] == r1["clip_window"]  # grad-clip's decisions agreed
    assert r0["params"] == r1["params"]


def test_per_rank_sub_runs_hold_each_ranks_own_raw_gradient_norms(watched):
    results, logdir = watched
    ranked = logdir / "ranked"
    assert sorted(p.name for p in ranked.iterdir() if p.is_dir()) == ["rank0", "rank1"]
    main = _load(ranked)
    for rank in (0, 1):
        sub = _load(ranked / f"rank{rank}")
        assert len(_event_files(ranked / f"rank{rank}")) == 1  # written by that rank alone
        assert {"grad-norm/global", "grad-norm/0", "grad-norm/2", "grad-norm/4"} <= \
            set(sub.Tags()["scalars"])
        assert "histogram/grad_raw/0.weight" in sub.Tags()["histograms"]
        assert "histogram/activation/0" in sub.Tags()["histograms"]
        assert "histogram/weight/0.weight" not in sub.Tags()["histograms"]  # the same on all
        steps, norms = _series(sub, "grad-norm/global")
        assert steps == list(range(6))
        # measured independently: this rank's batch through a copy of the model, no DDP
        np.testing.assert_allclose(norms, results[rank]["ranked"]["local_norms"], rtol=1e-5)
    # the run's own norm is of the averaged gradients: neither rank's
    _, averaged = _series(main, "grad-norm/global")
    assert not np.allclose(averaged, results[0]["ranked"]["local_norms"])
    # activation-stats probes each rank's own batch (an internal pass through the wrapped
    # module, which DDP does not synchronise): the run shows rank 0's
    tag = "activation-stats/1/mean"
    steps, on_rank0 = _series(_load(ranked / "rank0"), tag)
    assert steps == [0, 2, 4] and _series(main, tag) == (steps, on_rank0)
    assert not np.allclose(_series(_load(ranked / "rank1"), tag)[1], on_rank0)
    assert results[0]["ranked"]["params"] == results[1]["ranked"]["params"]
