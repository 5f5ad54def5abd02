"""Histogram builder: exact counts for PyTorch's bins, and buckets both loaders show right."""

import warnings

import numpy as np
import pytest
import reference_histogram
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tensorboard.compat.proto.summary_pb2 import HistogramProto

from gradlog.tensorboard import histogram
from gradlog.tensorboard.histogram import histogram_proto, tensorflow_edges


def buckets(proto):
    """[(left, right, count)] as TensorBoard's loaders derive them (float32 edges)."""
    lefts = [proto.min] + list(proto.bucket_limit[:-1])
    rights = list(proto.bucket_limit[:-1]) + [proto.max]
    return [(np.float32(a), np.float32(b), c) for a, b, c in zip(lefts, rights, proto.bucket)]


def assert_displayable(proto, finite):
    """The invariants the issue asks for, checked on one histogram."""
    shown = buckets(proto)
    assert sum(c for _, _, c in shown) == finite.size == proto.num
    assert shown[0][2] > 0 and shown[-1][2] > 0  # no empty edge buckets
    assert all(left < right for left, right, _ in shown)  # no zero-width or inverted ones
    if finite.min() < finite.max():
        assert proto.min == finite.min() and proto.max == finite.max()


def torch_counts(values, edges):
    """Counts of np.histogram with ``edges`` (what PyTorch computes), without the empty ends."""
    counts, _ = np.histogram(values.astype(np.float64), edges)
    nonzero = np.flatnonzero(counts)
    return counts[nonzero[0]:nonzero[-1] + 1]


def test_tensorflow_edges_are_pytorchs(tmp_path):
    edges = tensorflow_edges()
    assert len(edges) == 1549 and edges[774] == 0 and edges[775] == 1e-12
    assert np.all(np.diff(edges) > 0) and edges[-1] < 1e20 <= edges[-1] * 1.1
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    writer = tensorboard.SummaryWriter(str(tmp_path))
    writer.close()
    assert np.array_equal(edges, writer.default_bins)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int8])
def test_default_bins_count_exactly_like_numpy_with_pytorchs_edges(dtype):
    rng = np.random.default_rng(0)
    values = (rng.standard_normal(300_000) * 50).astype(dtype)
    proto, nonfinite = histogram_proto(values)
    assert nonfinite == 0
    assert_displayable(proto, values.astype(np.float64))
    inner = np.array(proto.bucket_limit[:-1])
    expected, _ = np.histogram(values.astype(np.float64), np.r_[proto.min, inner, proto.max])
    assert list(proto.bucket) == list(expected)
    assert proto.sum == pytest.approx(values.astype(np.float64).sum(), rel=1e-9, abs=1e-6)
    assert proto.sum_squares == pytest.approx(np.square(values.astype(np.float64)).sum(),
                                              rel=1e-6)
    # Interior buckets are PyTorch's buckets, with the same counts.
    assert np.array_equal(np.array(proto.bucket), torch_counts(values, tensorflow_edges()))


def test_values_on_and_next_to_edges_land_where_numpy_puts_them():
    edges = tensorflow_edges()
    picks = edges[[5, 700, 773, 774, 775, 900, 1500]]
    near = np.concatenate([picks, np.nextafter(picks, -np.inf), np.nextafter(picks, np.inf),
                           [-9.5e19, 9.5e19]])  # min and max away from any edge
    picks32 = picks.astype(np.float32)
    near32 = np.concatenate([picks32, np.nextafter(picks32, np.float32(-np.inf)),
                             np.nextafter(picks32, np.float32(np.inf)), [-9.5e19, 9.5e19]])
    for values in (near, near32.astype(np.float32), np.tile(near, 3000)):
        proto, _ = histogram_proto(values)
        assert np.array_equal(np.array(proto.bucket), torch_counts(values, edges))


def test_blocks_and_small_inputs_agree(monkeypatch):
    values = np.random.default_rng(1).standard_normal(10_000).astype(np.float32)
    whole, _ = histogram_proto(values)
    monkeypatch.setattr(histogram, "_BLOCK", 97)  # many blocks, a partial last one
    blocked, _ = histogram_proto(values)
    assert list(blocked.bucket) == list(whole.bucket)
    assert list(blocked.bucket_limit) == list(whole.bucket_limit)
    assert blocked.sum == pytest.approx(whole.sum) and blocked.min == whole.min


finite_floats = st.floats(allow_nan=False, allow_infinity=False, width=32)
any_floats = st.floats(width=32)


@given(hnp.arrays(np.float32, st.integers(1, 300), elements=any_floats),
       st.sampled_from(["tensorflow", 1, 7, 30, "auto", "fd", "sturges", [-1.0, 0.0, 0.5, 2.0]]),
       st.sampled_from([None, 1, 3, 50]))
def test_any_input_gives_a_displayable_histogram_and_counts_the_rest(values, bins, max_bins):
    finite = values[np.isfinite(values)]
    proto, nonfinite = histogram_proto(values, bins=bins, max_bins=max_bins)
    assert nonfinite == values.size - finite.size
    if finite.size == 0:
        assert proto is None
        return
    assert_displayable(proto, finite)
    if max_bins is not None:  # PyTorch's rule gives up to 2 * max_bins - 1 bins, and values
        assert len(proto.bucket) <= 2 * max_bins + 1  # outside explicit edges two more


@given(hnp.arrays(np.float64, st.integers(2, 200), elements=st.floats(-1e30, 1e30)))
def test_float64_values_are_bucketed_exactly_at_pytorchs_edges(values):
    proto, _ = histogram_proto(values)
    inner = np.array(proto.bucket_limit[:-1])
    assert np.isin(inner, tensorflow_edges()).all()
    expected, _ = np.histogram(values, np.r_[proto.min, inner, proto.max])
    assert list(proto.bucket) == list(expected) or values.min() == values.max()


def test_constant_tensor_is_one_bucket_of_width_one():
    proto, _ = histogram_proto(np.full((4, 5), 3.0, dtype=np.float32))
    assert (proto.min, proto.max, list(proto.bucket_limit), list(proto.bucket)) == (
        2.5, 3.5, [3.5], [20])
    huge, _ = histogram_proto(np.full(3, 1e12))  # +-0.5 vanishes in float32: wider
    assert buckets(huge)[0][0] < buckets(huge)[0][1]


def test_nonfinite_values_are_counted_and_left_out():
    values = np.array([1.0, np.nan, 2.0, np.inf, -np.inf, 3.0, np.nan], dtype=np.float32)
    proto, nonfinite = histogram_proto(values)
    assert nonfinite == 4 and proto.num == 3 and proto.min == 1.0 and proto.max == 3.0
    assert proto.sum == 6.0 and proto.sum_squares == 14.0
    assert histogram_proto(np.array([np.nan, np.inf]))[0] is None


def test_values_beyond_explicit_edges_go_to_the_outer_buckets():
    proto, _ = histogram_proto(np.array([-10.0, 0.5, 1.5, 10.0]), bins=[0.0, 1.0, 2.0])
    assert list(proto.bucket_limit) == [0.0, 1.0, 2.0, 10.0] and list(proto.bucket) == [1] * 4


def test_int_bins_match_numpy():
    values = np.random.default_rng(2).random(1000)
    proto, _ = histogram_proto(values, bins=30)
    counts, edges = np.histogram(values, bins=30)
    assert list(proto.bucket) == list(counts)
    assert np.allclose(proto.bucket_limit, edges[1:])


def test_auto_bins_are_capped_on_outliers():
    values = np.concatenate([np.zeros(10_000), np.arange(10) * 1e-9, [1e12]])
    proto, _ = histogram_proto(values, bins="auto")
    assert len(proto.bucket) <= histogram._MAX_ESTIMATED_BINS


@pytest.mark.parametrize("rule", ["auto", "fd"])
def test_a_subnormal_interquartile_width_is_capped_too(rule):
    # (hypothesis found it: the width's ratio to the range is inf)
    values = np.array([5e-324, 1.0, 0.0, 0.0, 0.0])
    proto, _ = histogram_proto(values, bins=rule)
    assert len(proto.bucket) == histogram._MAX_ESTIMATED_BINS
    assert (sum(proto.bucket), proto.bucket[0], proto.bucket[-1]) == (5, 4, 1)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="empty"):
        histogram_proto(np.array([]))
    with pytest.raises(TypeError, match="complex"):
        histogram_proto(np.array([1j]))
    with pytest.raises(ValueError, match="monotonically"):
        histogram_proto(np.arange(5.0), bins=[1.0, 0.0])


@pytest.mark.parametrize("bins, max_bins", [("doane", 5), ("doane", 3), (30, 7), (10, 5),
                                            ("auto", 4), ("sturges", 2), (12, 12)])
def test_max_bins_merges_as_pytorch_does(bins, max_bins):
    summary = pytest.importorskip("torch.utils.tensorboard.summary")
    values = np.arange(1024.0)
    proto, _ = histogram_proto(values, bins=bins, max_bins=max_bins)
    theirs = summary.make_histogram(values, bins, max_bins)
    assert theirs.bucket[0] == 0  # PyTorch's empty first bucket carries the left edge
    assert list(proto.bucket) == list(theirs.bucket[1:])
    assert list(proto.bucket_limit) == list(theirs.bucket_limit[1:])
    assert (proto.min, proto.max) == (theirs.bucket_limit[0], theirs.bucket_limit[-1])
    if (bins, max_bins) == ("doane", 5):
        assert len(proto.bucket) == 6  # 11 bins // 5 = groups of 2


def test_max_bins_must_be_positive():
    with pytest.raises(ValueError, match="max_bins must be at least 1, got 0"):
        histogram_proto(np.arange(3.0), max_bins=0)


# -- the one-pass histogram against wave 1's (tests/tensorboard/reference_histogram.py) -------

_EDGES = tensorflow_edges()
_AT_EDGES = np.concatenate([_EDGES, np.nextafter(_EDGES, -np.inf), np.nextafter(_EDGES, np.inf)])
_AT_EDGES32 = np.concatenate([_EDGES.astype(np.float32),
                              np.nextafter(_EDGES.astype(np.float32), np.float32(-np.inf)),
                              np.nextafter(_EDGES.astype(np.float32), np.float32(np.inf))])


_EDGES16 = np.unique(_EDGES[np.abs(_EDGES) <= 65504].astype(np.float16))
_AT_EDGES16 = np.concatenate([_EDGES16, np.nextafter(_EDGES16, np.float16(-np.inf)),
                              np.nextafter(_EDGES16, np.float16(np.inf))])
_TINY = {16: 2.0**-24, 32: 2.0**-149, 64: 5e-324}  # the smallest subnormal
_HUGE = {16: 65504.0, 32: 3.4028234663852886e38, 64: 1.7976931348623157e308}


def element_strategy(width):
    """Any float of that width, with the edges' neighbourhoods, zeros, subnormals, the largest
    values and non-finite values drawn often."""
    at_edges = {16: _AT_EDGES16, 32: _AT_EDGES32, 64: _AT_EDGES}[width]
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, _TINY[width], -_TINY[width], _HUGE[width],
               -_HUGE[width]]
    return st.one_of(st.floats(width=width), st.sampled_from([float(x) for x in at_edges]),
                     st.sampled_from(special))


def assert_same_histogram(values, bins, max_bins):
    """Bucket by bucket, the histogram wave 1 computed (sums: up to rounding order)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, nonfinite = histogram_proto(values, bins, max_bins)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # wave 1 warned beyond float32's range
        try:
            expected, expected_nonfinite = reference_histogram.histogram_proto(values, bins,
                                                                               max_bins)
        # numpy's rules refused a range of a few subnormals, and wave 1 failed on a subnormal
        # interquartile width ('auto', 'fd'); ours do not
        except (ValueError, OverflowError):
            finite = values[np.isfinite(values)]
            assert_displayable(got, finite.astype(np.float64))
            return
    assert nonfinite == expected_nonfinite
    if expected is None:
        assert got is None
        return
    assert list(got.bucket) == list(expected.bucket)
    assert list(got.bucket_limit) == list(expected.bucket_limit)
    assert (got.min, got.max, got.num) == (expected.min, expected.max, expected.num)
    finite = np.asarray(values, dtype=np.float64).ravel()
    finite = finite[np.isfinite(finite)]
    with np.errstate(over="ignore"):
        scale = float(np.abs(finite).sum()), float(np.square(finite).sum())
    for ours, theirs, size in ((got.sum, expected.sum, scale[0]),
                               (got.sum_squares, expected.sum_squares, scale[1])):
        if np.isfinite(theirs) and np.isfinite(size):
            assert abs(ours - theirs) <= 1e-12 * size + 1e-300


bin_choices = st.sampled_from(["tensorflow", 1, 2, 7, 30, "auto", "fd", "sturges", "doane",
                               [-1.0, 0.0, 0.5, 2.0], [0.0], [1.0, 1.0 + 2.0**-40, 3.0]])


@given(st.sampled_from([16, 32, 64]).flatmap(lambda width: hnp.arrays(
           {16: np.float16, 32: np.float32, 64: np.float64}[width], st.integers(1, 300),
           elements=element_strategy(width))),
       bin_choices, st.sampled_from([None, 1, 3, 50]))
def test_buckets_are_wave_1s_for_any_input(values, bins, max_bins):
    assert_same_histogram(values, bins, max_bins)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bins", ["tensorflow", 30, "auto"])
def test_buckets_are_wave_1s_across_blocks(monkeypatch, dtype, bins):
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.standard_normal(5000) * 0.03, np.zeros(700),
                             np.maximum(rng.standard_normal(3000), 0), _AT_EDGES[::7],
                             [np.nan, np.inf, -np.inf]]).astype(dtype)
    rng.shuffle(values)
    assert_same_histogram(values, bins, None)
    monkeypatch.setattr(histogram, "_BLOCK", 97)  # many blocks, a partial last one
    assert_same_histogram(values, bins, None)
    assert_same_histogram(values[:9364].reshape(-1, 4)[:, ::2], bins, 10)  # strided


def test_the_proto_is_the_one_built_field_by_field():
    values = np.random.default_rng(4).standard_normal(10_000)
    proto, _ = histogram_proto(values)
    rebuilt = HistogramProto(min=proto.min, max=proto.max, num=proto.num, sum=proto.sum,
                             sum_squares=proto.sum_squares, bucket_limit=list(proto.bucket_limit),
                             bucket=list(proto.bucket))
    assert proto.SerializeToString() == rebuilt.SerializeToString()
    assert len(proto.bucket) > 100 and all(c == int(c) for c in proto.bucket)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_counting_a_scratch_copy_in_place_equals_counting_through_the_buffer(dtype):
    rng = np.random.default_rng(4)
    values = (rng.standard_normal(150_000) * 0.05).astype(dtype)  # three blocks and a part
    values[::1001] = 0.0
    kept = values.copy()
    through_buffer = histogram.histogram_counts(values)
    assert np.array_equal(values, kept)  # not the caller's to reorder
    in_place = histogram.histogram_counts(values, scratch=True)
    assert np.array_equal(np.sort(values), np.sort(kept))  # reordered, the same values
    assert np.array_equal(in_place.below, through_buffer.below)
    assert (in_place.low, in_place.high, in_place.num) == \
        (through_buffer.low, through_buffer.high, through_buffer.num)
    assert in_place.total == pytest.approx(through_buffer.total, rel=1e-12)
    assert in_place.squares == pytest.approx(through_buffer.squares, rel=1e-12)
    reference = np.histogram(kept.astype(np.float64), bins=np.concatenate(
        ([kept.min()], through_buffer.edges, [kept.max()])))[0]
    assert np.array_equal(np.diff(np.concatenate(([0], in_place.below, [kept.size]))),
                          reference)
