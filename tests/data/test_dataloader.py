"""Datasets and the DataLoader: batching, drop_last, default collate (tensors, arrays, numbers,
tuples, dicts), reproducible shuffling, the one-fancy-index fast path, random_split, and
resuming mid-epoch with exactly the batches of the uninterrupted run."""

import numpy as np
import pytest

import gradlog as gl
from gradlog.data import (
    DataLoader,
    Dataset,
    Shapes,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)


class Items(Dataset):
    """Item ``i`` is ``make(i)``; records which indices were fetched."""

    def __init__(self, n, make=lambda i: i):
        self.n, self.make, self.fetched = n, make, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.fetched.append(i)
        return self.make(i)


def firsts(loader):
    """The first sample index of each batch, for loaders over ``TensorDataset(arange(n))``."""
    return [batch[0].tolist() for batch in loader]


# -- batching ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n,bs,drop_last,sizes", [
    (10, 3, False, [3, 3, 3, 1]),
    (10, 3, True, [3, 3, 3]),
    (9, 3, True, [3, 3, 3]),
    (2, 5, False, [2]),
    (2, 5, True, []),
])
def test_batch_sizes_and_len(n, bs, drop_last, sizes):
    loader = DataLoader(Items(n), batch_size=bs, drop_last=drop_last)
    batches = list(loader)
    assert [len(b) for b in batches] == sizes and len(loader) == len(sizes)
    assert sum((b.tolist() for b in batches), []) == list(range(sum(sizes)))


def test_batch_size_must_be_positive():
    with pytest.raises(ValueError, match="batch_size should be a positive integer value, but "
                                         "got batch_size=0"):
        DataLoader(Items(3), batch_size=0)


def test_default_collate_types_like_pytorch():
    assert default_collate([1, 2]).dtype == gl.int64
    assert default_collate([1.5, 2.0]).dtype == gl.float64
    assert default_collate([True, False]).tolist() == [True, False]
    arrays = default_collate([np.zeros((2, 2), np.float32), np.ones((2, 2), np.float32)])
    assert arrays.shape == (2, 2, 2) and arrays.dtype == gl.float32
    scalars = default_collate([np.int32(1), np.int32(2)])
    assert scalars.dtype == gl.int32 and scalars.tolist() == [1, 2]
    stacked = default_collate([gl.tensor([1.0, 2.0]), gl.tensor([3.0, 4.0])])
    assert stacked.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert default_collate(["a", "b"]) == ["a", "b"]


def test_default_collate_recurses_into_tuples_lists_and_dicts():
    samples = [({"x": np.full(2, i, np.float32), "name": f"s{i}"}, i) for i in range(3)]
    (features, labels) = default_collate(samples)
    assert isinstance(features, dict) and features["name"] == ["s0", "s1", "s2"]
    assert features["x"].tolist() == [[0, 0], [1, 1], [2, 2]] and labels.tolist() == [0, 1, 2]
    assert isinstance(default_collate([(1, 2), (3, 4)]), list)  # as PyTorch: tuples -> list


def test_default_collate_errors():
    with pytest.raises(TypeError, match="default_collate: batch must contain tensors, numpy "
                                        "arrays, numbers, dicts or lists; found <class 'object'>"):
        default_collate([object()])
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal "
                                           "size"):
        default_collate([[1, 2], [3]])


def test_custom_collate_fn_gets_the_samples():
    loader = DataLoader(Items(5), batch_size=2, collate_fn=lambda items: sum(items))
    assert list(loader) == [1, 5, 4]


def test_tensor_dataset_batches_with_one_index_per_tensor():
    x = gl.arange(20, dtype=gl.float32).reshape(10, 2)
    y = gl.arange(10)
    ds = TensorDataset(x, y)
    assert len(ds) == 10 and ds[3][0].tolist() == [6.0, 7.0] and ds[3][1].item() == 3
    xb, yb = next(iter(DataLoader(ds, batch_size=4)))
    assert xb.tolist() == x[:4].tolist() and yb.tolist() == [0, 1, 2, 3]
    assert xb.dtype == gl.float32 and yb.dtype == gl.int64
    assert not np.shares_memory(xb.numpy(), x.numpy())  # batches are copies
    with pytest.raises(ValueError, match="Size mismatch between tensors"):
        TensorDataset(x, gl.arange(3))


def test_shapes_loads_a_batch_with_one_fancy_index(monkeypatch):
    ds = Shapes(64, size=16, seed=3)
    fast = list(DataLoader(ds, batch_size=16, shuffle=True, seed=5))
    slow = list(DataLoader(ds, batch_size=16, shuffle=True, seed=5,
                           collate_fn=default_collate))
    for (xf, yf), (xs, ys) in zip(fast, slow):
        assert xf.dtype == xs.dtype == gl.float32 and yf.dtype == ys.dtype == gl.int64
        np.testing.assert_array_equal(xf.numpy(), xs.numpy())
        np.testing.assert_array_equal(yf.numpy(), ys.numpy())
    calls = []
    original = Shapes.__getitem__
    monkeypatch.setattr(Shapes, "__getitem__", lambda self, i: (calls.append(i),
                                                                original(self, i))[1])
    batches = list(DataLoader(ds, batch_size=16))
    assert len(batches) == 4 and batches[0][0].shape == (16, 1, 16, 16)
    assert calls == [0]  # one probe when the loader is built (is item 0 the arrays' row?)


def test_dataset_with_transform_is_fetched_item_by_item():
    ds = Shapes(8, size=16)
    ds.transform = lambda img: img * 2  # the loader must not bypass a transform
    assert DataLoader(ds, batch_size=4)._arrays is None

    class Augmented(Shapes):
        def __getitem__(self, i):
            image, label = super().__getitem__(i)
            return image[:, ::-1], label

    assert DataLoader(Augmented(8, size=16), batch_size=4)._arrays is None


def test_subset_of_array_dataset_keeps_the_fast_path():
    ds = TensorDataset(gl.arange(10) * 10)
    sub = Subset(ds, [9, 2, 5, 7])
    loader = DataLoader(sub, batch_size=3)
    assert loader._arrays is not None
    assert [b[0].tolist() for b in loader] == [[90, 20, 50], [70]]
    assert sub[1][0].item() == 20 and len(sub) == 4


def test_getitems_protocol_is_used_for_batched_fetch():
    class Batched(Items):
        def __getitems__(self, indices):
            self.fetched.append(tuple(indices))
            return [i * 2 for i in indices]

    ds = Batched(5)
    assert [b.tolist() for b in DataLoader(ds, batch_size=2)] == [[0, 2], [4, 6], [8]]
    assert ds.fetched == [(0, 1), (2, 3), (4,)]


# -- shuffling ---------------------------------------------------------------------------------

def arange_loader(n=20, **kw):
    return DataLoader(TensorDataset(gl.arange(n)), batch_size=1, shuffle=True, **kw)


def test_shuffle_is_a_permutation_and_changes_every_epoch():
    loader = arange_loader(seed=0)
    e1, e2 = firsts(loader), firsts(loader)
    assert sorted(sum(e1, [])) == list(range(20)) and e1 != e2


def test_shuffle_reproducible_with_seed_generator_or_manual_seed():
    assert firsts(arange_loader(seed=7)) == firsts(arange_loader(seed=7))
    assert firsts(arange_loader(seed=7)) != firsts(arange_loader(seed=8))
    g1, g2 = gl.Generator().manual_seed(1), gl.Generator().manual_seed(1)
    assert firsts(arange_loader(generator=g1)) == firsts(arange_loader(generator=g2))
    gl.manual_seed(3)
    a = firsts(arange_loader())
    gl.manual_seed(3)
    assert firsts(arange_loader()) == a
    with pytest.raises(ValueError, match="either generator or seed"):
        arange_loader(seed=1, generator=g1)


def test_random_split_lengths_and_fractions():
    ds = TensorDataset(gl.arange(10))
    a, b = random_split(ds, [3, 7], generator=gl.Generator().manual_seed(0))
    got = sorted(a.indices + b.indices)
    assert (len(a), len(b)) == (3, 7) and got == list(range(10))
    parts = random_split(ds, [0.5, 0.3, 0.2], generator=gl.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [5, 3, 2]
    parts = random_split(range(11), [0.5, 0.5], generator=gl.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [6, 5]  # the remainder goes to the first split
    same = random_split(ds, [3, 7], generator=gl.Generator().manual_seed(0))
    assert same[0].indices == a.indices
    with pytest.raises(ValueError, match="Sum of input lengths does not equal the length"):
        random_split(ds, [3, 8])


# -- resuming ----------------------------------------------------------------------------------

def batches_of(loader, count):
    it = iter(loader)
    return [next(it)[0].tolist() for _ in range(count)]


@pytest.mark.parametrize("how", ["seed", "generator", "default", "no-shuffle"])
@pytest.mark.parametrize("cut", [0, 1, 3, 5])
def test_resume_mid_epoch_sees_exactly_the_uninterrupted_batches(how, cut, tmp_path):
    """Three epochs of 5 batches; stop after ``cut`` batches of epoch 1, checkpoint (through
    gl.save), restore into a fresh loader, and read the rest."""

    def make():
        kw = {"seed": 11} if how == "seed" else (
            {"generator": gl.Generator().manual_seed(11)} if how == "generator" else {})
        return DataLoader(TensorDataset(gl.arange(14)), batch_size=3, shuffle=how != "no-shuffle",
                          **kw)

    gl.manual_seed(0)
    full = [[b[0].tolist() for b in make_epoch] for make_epoch in _epochs(make(), 3)]

    gl.manual_seed(0)
    loader = make()
    seen = [[b[0].tolist() for b in loader]]
    it = iter(loader)
    seen.append([next(it)[0].tolist() for _ in range(cut)])
    gl.save({"loader": loader.state_dict(), "rng": gl.get_rng_state()}, tmp_path / "c")

    ckpt = gl.load(tmp_path / "c")
    gl.manual_seed(123)  # the resumed process starts from another random state
    resumed = make()
    resumed.load_state_dict(ckpt["loader"])
    gl.set_rng_state(ckpt["rng"])  # as gradlog train restores the global random state
    seen[1] += [b[0].tolist() for b in resumed]
    seen.append([b[0].tolist() for b in resumed])
    assert seen == full


def _epochs(loader, n):
    for _ in range(n):
        yield list(loader)


def test_state_dict_contents_and_epoch_counting():
    loader = DataLoader(TensorDataset(gl.arange(6)), batch_size=2, shuffle=True, seed=0)
    assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["batch"] == 0
    it = iter(loader)
    next(it)
    sd = loader.state_dict()
    assert (sd["epoch"], sd["batch"]) == (0, 1)
    assert sorted(sd["permutation"].tolist()) == list(range(6))
    assert sd["generator"].dtype == np.uint8
    list(it)
    sd = loader.state_dict()
    assert (sd["epoch"], sd["batch"], sd["permutation"]) == (1, 0, None)
    next(iter(loader))  # an abandoned epoch still counts
    list(loader)
    assert loader.state_dict()["epoch"] == 3


def test_resume_after_last_batch_finishes_the_epoch_then_continues():
    def make():
        return DataLoader(TensorDataset(gl.arange(4)), batch_size=2, shuffle=True, seed=2)

    uninterrupted = make()
    full = [firsts(uninterrupted), firsts(uninterrupted)]
    loader = make()
    it = iter(loader)
    head = [next(it)[0].tolist() for _ in range(2)]  # last batch taken, epoch not closed yet
    resumed = make()
    resumed.load_state_dict(loader.state_dict())
    assert list(resumed) == []  # the rest of epoch 0 is empty
    assert [head, firsts(resumed)] == full


def test_load_state_dict_validates():
    loader = DataLoader(TensorDataset(gl.arange(6)), batch_size=2, shuffle=True, seed=0)
    it = iter(loader)
    next(it)
    sd = loader.state_dict()
    with pytest.raises(ValueError, match="the saved permutation has 6 indices but the dataset "
                                         "has 5 samples"):
        DataLoader(TensorDataset(gl.arange(5)), batch_size=2, shuffle=True).load_state_dict(sd)
    with pytest.raises(ValueError, match="shuffles with the default generator"):
        DataLoader(TensorDataset(gl.arange(6)), batch_size=2, shuffle=True).load_state_dict(sd)
