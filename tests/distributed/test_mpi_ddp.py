"""gradlog.distributed and DistributedDataParallel on two MPI processes: the collectives'
values and errors, losses equal to one process at the global batch (MLP exactly; CNN with
BatchNorm against the one-process run whose statistics are per rank's share, as PyTorch's
DDP keeps them), bucket order and overlap with backward, no_sync, unused parameters."""

from __future__ import annotations

import numpy as np
import pytest
from dist_launch import mpi

pytestmark = pytest.mark.slow


def _launch(tmp_path_factory, scenario: str) -> list[dict]:
    out = tmp_path_factory.mktemp(scenario)
    done = mpi(2, scenario, str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.results(out, 2)


@pytest.fixture(scope="module")
def collectives(tmp_path_factory):
    return _launch(tmp_path_factory, "collectives")


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    return _launch(tmp_path_factory, "ddp")


@pytest.fixture(scope="module")
def batchnorm(tmp_path_factory):
    return _launch(tmp_path_factory, "batchnorm")


def test_collectives_reduce_broadcast_and_gather_tensors_in_place(collectives):
    base = np.array([1.0, -2.0, 3.0])  # rank k holds base * (k + 1)
    for rank, seen in enumerate(collectives):
        assert (seen["before"], seen["rank"], seen["world_size"], seen["backend"]) == \
            (False, rank, 2, "mpi")
        assert seen["SUM"] == (base * 3).tolist()
        assert seen["AVG"] == (base * 1.5).tolist()
        assert seen["MAX"] == np.maximum(base, base * 2).tolist()
        assert seen["MIN"] == np.minimum(base, base * 2).tolist()
        assert seen["PRODUCT"] == (base * base * 2).tolist()
        assert seen["async"] == [(base * 3).tolist(), True]
        assert seen["broadcast"] == [1.0, 1.0]  # from src=1
        assert seen["all_gather"] == [[0, 0], [1, 10]]
        assert seen["after"] is False  # destroy_process_group


def test_collectives_refuse_bad_input_naming_the_values(collectives):
    errors = collectives[1]["errors"]
    assert errors["gather_list"] == ("ValueError: all_gather: tensor_list must be a list of 2 "
                                     "tensors (one per rank), got 1")
    assert errors["src"] == "ValueError: src=2 is not a rank of this group (ranks 0 to 1)"
    assert errors["avg_int"] == ("ValueError: ReduceOp.AVG needs a floating-point tensor, got "
                                 "int64")
    assert errors["twice"] == "ValueError: trying to initialize the default process group twice!"
    assert errors["op"].startswith("ValueError: unknown reduce op 'median'; accepted: ReduceOp.SUM")


def test_engine_collectives_of_a_gradlog_run_use_the_mpi_group(collectives):
    for rank, seen in enumerate(collectives):
        engine = seen["engine"]  # rank k passes [k + 1, 2k]
        assert engine["mean"] == [1.5, 1.0] and engine["sum"] == [3, 2]
        assert engine["max"] == [2, 2] and engine["min"] == [1, 0]
        assert engine["text"] == "from rank 1"
        assert engine["gather"] == [[0, 0], [1, 1]]
        assert engine["ranks"] == [rank, 2]


def test_ddp_trains_as_one_process_at_the_global_batch(ddp):
    r0, r1 = ddp
    # the ranks started from different weights: DDP copied rank 0's
    assert r0["start_equal_rank0"] and r1["start_equal_rank0"]
    np.testing.assert_allclose(r0["losses"], r0["ref_losses"], rtol=1e-6, atol=1e-7)
    assert r0["losses"] == r1["losses"]
    assert r0["params"] == r1["params"]  # the replicas never diverge
    np.testing.assert_allclose(r0["params"], r0["ref_params"], rtol=1e-5, atol=1e-6)


def test_buckets_are_rebuilt_in_backward_order_and_launched_during_backward(ddp):
    r0, r1 = ddp
    # bucket_cap_mb tiny: one bucket per parameter once rebuilt, last layer first
    layers = [names[0].split(".")[0] for names in r0["buckets"]]
    assert len(r0["buckets"]) == 6 and layers == ["4", "4", "2", "2", "0", "0"]
    assert r1["buckets"] == r0["buckets"]  # rank 0's order on every rank
    # the first iteration reduces everything at the end (one bucket, not yet launched when
    # backward reaches the first layer); afterwards the buckets of layers 4 and 2 are already
    # in flight when backward reaches layer 0
    assert r0["launched_at_first_layer"] == [0, 4, 4, 4, 4]
    assert r0["timing"]["launch"] > 0 and r0["timing"]["wait"] >= 0


def test_no_sync_accumulates_locally_then_the_next_backward_averages_the_total(ddp):
    r0, r1 = ddp
    assert not np.allclose(r0["no_sync_local"], r1["no_sync_local"])  # each rank's own
    assert r0["accumulated"] == r1["accumulated"]
    np.testing.assert_allclose(r0["accumulated"], r0["accumulate_ref"], rtol=1e-5, atol=1e-7)


def test_find_unused_parameters_averages_zeros_for_a_parameter_one_rank_did_not_use(ddp):
    r0, r1 = ddp
    # head b is used on rank 0 only: both ranks hold half of rank 0's gradient
    np.testing.assert_allclose(r0["unused_b_grad"], np.array(r0["local_b_grad"]) / 2,
                               rtol=1e-6)
    assert r1["unused_b_grad"] == r0["unused_b_grad"] and r1["local_b_grad"] is None
    assert r0["unused_c_grad"] is None and r1["unused_c_grad"] is None  # used by no rank


def test_an_unused_parameter_without_find_unused_parameters_is_named(ddp):
    for seen in ddp:
        assert seen["unused_error"] == (
            "DistributedDataParallel: 4 parameter(s) received no gradient in this backward "
            "pass: b.weight, b.bias, c.weight, c.bias. Every parameter must take part in "
            "producing the loss, or pass find_unused_parameters=True")


def test_different_models_on_the_ranks_are_refused_on_every_rank(ddp):
    for rank, seen in enumerate(ddp):
        assert seen["different_models"].startswith(
            "DistributedDataParallel: rank 1 wraps a different model than rank 0")
        assert f"This rank ({rank}) has: weight ({4 + rank}, 8)" in seen["different_models"]


def test_batchnorm_normalises_per_rank_share_and_keeps_rank0_running_statistics(batchnorm):
    r0, r1 = batchnorm
    ghost = r0["ghost"]  # one process, the global batch, BN statistics per rank's share
    np.testing.assert_allclose(r0["losses"], ghost["losses"], rtol=1e-6)
    assert r1["losses"] == r0["losses"]
    np.testing.assert_allclose(r0["running_mean"], ghost["running_mean"], rtol=1e-5, atol=1e-7)
    assert r0["num_batches_tracked"] == ghost["num_batches_tracked"] == 4
    np.testing.assert_allclose(r0["eval_loss"], ghost["eval_loss"], rtol=1e-5)
    # rank 1's running statistics are its own until the next forward broadcasts rank 0's
    assert not np.allclose(r1["running_mean"], r0["running_mean"])
    # and the statistics really are per share: full-batch BatchNorm trains differently
    assert np.max(np.abs(np.array(r0["full_batch_losses"]) - r0["losses"])) > 1e-3
