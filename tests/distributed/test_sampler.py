"""``DistributedSampler`` (each rank's share, PyTorch's index layout) and ``DataLoader``'s
``sampler=``, including a mid-epoch position saved with two ranks and resumed with one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gradlog as gl
from gradlog.data import DataLoader, DistributedSampler, TensorDataset


def _dataset(n: int) -> TensorDataset:
    return TensorDataset(gl.arange(n), gl.arange(n) * 10)


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 2, False), (11, 2, False),
                                                  (11, 2, True), (5, 3, False), (7, 3, True),
                                                  (2, 4, False)])
def test_unshuffled_indices_are_pytorchs(n, replicas, drop_last):
    torch = pytest.importorskip("torch")
    for rank in range(replicas):
        ours = DistributedSampler(_dataset(n), num_replicas=replicas, rank=rank, shuffle=False,
                                  drop_last=drop_last)
        theirs = torch.utils.data.DistributedSampler(list(range(n)), num_replicas=replicas,
                                                     rank=rank, shuffle=False,
                                                     drop_last=drop_last)
        assert list(ours) == list(theirs)
        assert (len(ours), ours.total_size) == (len(theirs), theirs.total_size)


@given(n=st.integers(1, 60), replicas=st.integers(1, 5), drop_last=st.booleans(),
       seed=st.integers(0, 100), epoch=st.integers(0, 3))
def test_ranks_split_one_order_that_is_the_same_for_any_number_of_ranks(n, replicas,
                                                                        drop_last, seed, epoch):
    shares = []
    for rank in range(replicas):
        s = DistributedSampler(_dataset(n), num_replicas=replicas, rank=rank, seed=seed,
                               drop_last=drop_last)
        s.set_epoch(epoch)
        shares.append(list(s))
        assert len(shares[-1]) == len(s)
    whole = DistributedSampler(_dataset(n), num_replicas=1, rank=0, seed=seed)
    whole.set_epoch(epoch)
    order = list(whole)
    assert sorted(order) == list(range(n))
    # interleaved: position j of the (cut or padded) order goes to rank j % replicas
    total = len(shares[0]) * replicas
    expected = (order * (total // n + 1))[:total]
    merged = [shares[j % replicas][j // replicas] for j in range(total)]
    assert merged == expected


def test_set_epoch_changes_the_order_and_the_same_epoch_repeats_it():
    s = DistributedSampler(_dataset(40), num_replicas=2, rank=1, seed=5)
    first = list(s)
    assert list(s) == first
    s.set_epoch(1)
    assert list(s) != first
    s.set_epoch(0)
    assert list(s) == first


def test_a_bad_rank_is_refused_as_pytorch_words_it():
    with pytest.raises(ValueError, match=r"Invalid rank 2, rank should be in the interval "
                                         r"\[0, 1\]"):
        DistributedSampler(_dataset(4), num_replicas=2, rank=2)


def test_the_default_ranks_need_an_initialized_process_group():
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        DistributedSampler(_dataset(4))


def test_loader_reads_the_samplers_share_and_refuses_shuffle_with_it():
    ds = _dataset(10)
    sampler = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=False)
    batches = [b[0].tolist() for b in DataLoader(ds, batch_size=2, sampler=sampler)]
    assert batches == [[1, 3], [5, 7], [9]]
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        DataLoader(ds, batch_size=2, shuffle=True, sampler=sampler)


def test_a_position_saved_on_two_ranks_resumes_on_one_with_the_same_global_batches():
    ds = _dataset(48)
    per_rank = []
    for rank in (0, 1):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, seed=9)
        sampler.set_epoch(2)
        loader = DataLoader(ds, batch_size=4, sampler=sampler)
        it = iter(loader)
        for _ in range(3):
            next(it)
        per_rank.append((loader.state_dict(), [b[0].tolist() for b in it]))
    state = per_rank[0][0]
    assert state["permutation"] is None and state["sampler"] == {"epoch": 2}
    resumed = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds, num_replicas=1,
                                                                      rank=0, seed=9))
    resumed.load_state_dict(state)
    rest = [sorted(b[0].tolist()) for b in resumed]
    expected = [sorted(a + b) for a, b in zip(per_rank[0][1], per_rank[1][1])]
    assert rest == expected and len(rest) == 3
