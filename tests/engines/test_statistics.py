"""The engines' histogram counts equal numpy's bucket by bucket (the writer's own code on the
values), for every dtype, on adversarial values, and under deterministic algorithms."""

from __future__ import annotations

import numpy as np
import pytest

from gradlog.engines.gradlog import GradlogEngine
from gradlog.tensorboard.histogram import counts_proto, histogram_proto, tensorflow_edges

torch = pytest.importorskip("torch")
from gradlog.engines._torch_statistics import TorchStatistics  # noqa: E402
from gradlog.engines.torch import TorchEngine  # noqa: E402

DTYPES = ("float32", "float16", "bfloat16", "float64")
BINS = ("tensorflow", 30, 1, [-1.0, 0.0, 1e-12, 0.5, 2.0])


def _adversarial(dtype) -> torch.Tensor:
    edges = tensorflow_edges()
    picked = edges[::37]
    values = np.concatenate([
        picked, -picked, np.nextafter(picked, np.inf), np.nextafter(picked, -np.inf),
        [0.0, -0.0, 1e-45, -1e-45, 1e-310, 5e-324, 1e-12, -1e-12, 0.5, 2.0, -1.0, 1.0],
        np.random.default_rng(0).standard_normal(2000),
        [np.nan, np.inf, -np.inf]])
    return torch.from_numpy(values).to(getattr(torch, dtype))


def _numpy_of(t: torch.Tensor) -> np.ndarray:
    # what the plugins did before: bfloat16 through float32, everything to the host
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def _same(proto, expected) -> None:
    assert proto is not None and expected is not None
    assert list(proto.bucket) == list(expected.bucket)
    assert list(proto.bucket_limit) == list(expected.bucket_limit)
    assert (proto.min, proto.max, proto.num) == (expected.min, expected.max, expected.num)
    assert proto.sum == pytest.approx(expected.sum, rel=1e-12, abs=1e-300)
    assert proto.sum_squares == pytest.approx(expected.sum_squares, rel=1e-12, abs=1e-300)


def _device_counts(tensors, bins="tensorflow"):
    # the counting CUDA tensors get on the side stream, run here on CPU tensors
    return TorchStatistics(torch).counts_on_device(tensors, bins)()


@pytest.mark.parametrize("bins", BINS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("where", ["device code", "engine"])
def test_torch_counts_equal_numpy_bucket_by_bucket(dtype, bins, where) -> None:
    t = _adversarial(dtype)
    if where == "engine":
        got = TorchEngine().histogram_counts([t, t[:100]], bins)()
    else:
        got = _device_counts([t, t[:100]], bins)
    for counts, values in zip(got, (t, t[:100])):
        expected, nonfinite = histogram_proto(_numpy_of(values), bins)
        _same(counts_proto(counts), expected)
        assert counts.nonfinite == nonfinite


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_counts_random_data_many_shapes(dtype) -> None:
    rng = np.random.default_rng(1)
    tensors = [torch.from_numpy(rng.standard_normal(shape) * scale).to(getattr(torch, dtype))
               for shape, scale in (((64, 32), 1.0), ((5000,), 1e-3), ((7,), 1e4))]
    tensors.append(torch.relu(tensors[0]))  # many exact zeros
    for bins in ("tensorflow", 64):
        for counts, t in zip(_device_counts(tensors, bins), tensors):
            _same(counts_proto(counts), histogram_proto(_numpy_of(t), bins)[0])


def test_integer_and_constant_tensors() -> None:
    engine = TorchEngine()
    for t in (torch.arange(-50, 50), torch.full((10,), 3.0), torch.tensor([True, False])):
        _same(counts_proto(engine.histogram_counts([t])()[0]), histogram_proto(t.numpy())[0])
        _same(counts_proto(_device_counts([t])[0]), histogram_proto(t.numpy())[0])


def test_all_nonfinite_gives_no_histogram_and_counts_them() -> None:
    t = torch.tensor([float("nan"), float("inf")])
    for counts in (TorchEngine().histogram_counts([t])()[0], _device_counts([t])[0]):
        assert counts_proto(counts) is None and counts.nonfinite == 2


def test_counts_under_deterministic_algorithms() -> None:
    t = _adversarial("float32")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        counts = _device_counts([t])[0]
    finally:
        torch.use_deterministic_algorithms(before)
    _same(counts_proto(counts), histogram_proto(t.numpy())[0])


def test_empty_and_complex_are_refused_at_once() -> None:
    engine = TorchEngine()
    with pytest.raises(ValueError, match="empty"):
        engine.histogram_counts([torch.zeros(0)])
    with pytest.raises(TypeError, match="complex"):
        engine.histogram_counts([torch.zeros(2, dtype=torch.complex64)])


def test_numpy_rule_bins_counted_on_the_host_equal_numpy() -> None:
    t = _adversarial("float32")
    _same(counts_proto(TorchEngine().histogram_counts([t], "fd")()[0]),
          histogram_proto(t.numpy(), "fd")[0])


def test_torch_engine_counts_a_snapshot_taken_at_the_call() -> None:
    t = torch.from_numpy(np.random.default_rng(3).standard_normal(300).astype(np.float32))
    expected = histogram_proto(t.numpy().copy())[0]
    pending = TorchEngine().histogram_counts([t])
    sums = TorchEngine().sums_of_squares([t], subtract=[torch.zeros_like(t)])
    t.mul_(0.0)  # the step goes on changing the tensor: the results are of the snapshot
    _same(counts_proto(pending()[0]), expected)
    assert sums()[0] == pytest.approx(expected.sum_squares, rel=1e-12)


def test_gradlog_engine_counts_a_snapshot() -> None:
    import gradlog as gl
    t = gl.tensor(np.random.default_rng(2).standard_normal(300).astype(np.float32))
    pending = GradlogEngine().histogram_counts([t])
    expected = histogram_proto(t.numpy().copy())[0]
    t.data[...] = 0.0  # the step goes on changing the tensor: the counts are of the snapshot
    _same(counts_proto(pending()[0]), expected)


@pytest.mark.parametrize("engine_name", ["gradlog", "torch"])
def test_nonfinite_counts(engine_name) -> None:
    values = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], dtype=np.float32)
    if engine_name == "torch":
        engine, t = TorchEngine(), torch.from_numpy(values)
        ints = torch.arange(3)
    else:
        import gradlog as gl
        engine, t, ints = GradlogEngine(), gl.tensor(values), gl.arange(3)
    assert engine.nonfinite_counts([t, ints]) == [3, 0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_counts_equal_numpy_and_leave_the_training_stream_alone(dtype) -> None:
    t = _adversarial(dtype).cuda()
    stream = torch.cuda.current_stream()
    pending = TorchEngine().histogram_counts([t], "tensorflow")
    t.mul_(0.0)  # queued after the snapshot on the training stream
    assert torch.cuda.current_stream() == stream
    expected, _ = histogram_proto(_numpy_of(_adversarial(dtype)))
    _same(counts_proto(pending()[0]), expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sums_of_squares_on_the_host_and_on_the_device_equal_float64(dtype) -> None:
    rng = np.random.default_rng(5)
    before = torch.from_numpy(rng.standard_normal(70_000)).to(getattr(torch, dtype))
    after = (before.double() + 1e-3).to(before.dtype)
    wide_before, wide_after = before.double().numpy(), after.double().numpy()
    expected = [float(np.sum((wide_after - wide_before) ** 2)), float(np.sum(wide_before ** 2))]
    engine, device = TorchEngine(), TorchStatistics(torch)
    got = [engine.sums_of_squares([after], subtract=[before])()[0],
           engine.sums_of_squares([before])()[0]]
    on_device = [device.squares_on_device([after], [before])()[0],
                 device.squares_on_device([before])()[0]]
    assert got == pytest.approx(expected, rel=1e-12)
    assert on_device == pytest.approx(expected, rel=1e-12)


def _engine_and_tensor(name: str, values: torch.Tensor):
    if name == "torch":
        return TorchEngine(), values.clone()
    import gradlog as gl
    return GradlogEngine(), gl.tensor(_numpy_of(values).copy())


def _large(dtype) -> torch.Tensor:
    # more values than one sorted block (65536), a partial last block, and the edges' cases
    rng = np.random.default_rng(11)
    return torch.cat([_adversarial(dtype), torch.from_numpy(
        rng.standard_normal(140_000) * 0.03).to(getattr(torch, dtype))])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("engine_name", ["gradlog", "torch"])
def test_counts_are_of_the_logging_step_and_reorder_only_their_own_copies(engine_name,
                                                                          dtype) -> None:
    if engine_name == "gradlog" and dtype == "bfloat16":
        pytest.skip("numpy has no bfloat16")
    values = _large(dtype)
    expected = histogram_proto(_numpy_of(values).copy())[0]
    engine, t = _engine_and_tensor(engine_name, values)
    pending = engine.histogram_counts([t])
    with engine.no_grad():
        t.mul_(-0.5)  # in place, after the logging step: the counts are of the values before
    _same(counts_proto(pending()[0]), expected)
    # a snapshot the caller keeps (the update ratios' weights) is counted, never reordered
    snapshot = engine.snapshot([t])[0]
    kept = np.array(engine.to_numpy(snapshot))
    engine.histogram_counts([snapshot])()
    assert np.array_equal(engine.to_numpy(snapshot), kept, equal_nan=True)


@pytest.mark.parametrize("engine_name", ["gradlog", "torch"])
def test_counts_asked_by_two_threads_at_once_are_computed_once(engine_name) -> None:
    # (a rank's sub-run and the run share one call's counts; the counting sorts its copy)
    import threading
    values = _large("float32")
    expected = histogram_proto(_numpy_of(values).copy())[0]
    engine, t = _engine_and_tensor(engine_name, values)
    pending = engine.histogram_counts([t])
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(pending()[0]))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 2 and results[0] is results[1]
    _same(counts_proto(results[0]), expected)


def _finite_cases(dtype):
    big = float(np.finfo(dtype).max)
    rng = np.random.default_rng(0)
    plain = rng.standard_normal(257).astype(dtype)
    cases = {"plain": plain, "empty": np.zeros(0, dtype),
             "overflowing sum of finite values": np.full(8, big, dtype),
             "+inf and -inf": np.array([np.inf, -np.inf, 1.0], dtype)}
    for name, value in (("nan", np.nan), ("+inf", np.inf), ("-inf", -np.inf)):
        one = plain.copy()
        one[100] = value
        cases[name] = one
    return cases


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("engine", [GradlogEngine, TorchEngine], ids=["gradlog", "torch"])
def test_all_finite_is_numpys_isfinite_all(engine, dtype) -> None:
    eng = engine()
    for name, values in _finite_cases(dtype).items():
        with np.errstate(over="ignore"):
            expected = bool(np.isfinite(values).all())
        assert eng.all_finite(eng.from_numpy(values)) is expected, name
    assert eng.all_finite(eng.from_numpy(np.array([1, 2], np.int64))) is True


def test_all_finite_of_torch_bfloat16_complex_and_sparse_tensors() -> None:
    eng = TorchEngine()
    bf = torch.full((5,), 3e38, dtype=torch.bfloat16)  # (a sum that overflows)
    assert eng.all_finite(bf) is True
    bf[2] = float("nan")
    assert eng.all_finite(bf) is False
    z = torch.tensor([1 + 2j, 3 - 1j])
    assert eng.all_finite(z) is True
    assert eng.all_finite(torch.tensor([1 + 2j, complex(float("inf"), 0)])) is False
    sparse = torch.tensor([[0.0, float("nan")], [1.0, 0.0]]).to_sparse()
    assert eng.all_finite(sparse) is False
    assert eng.all_finite(torch.eye(2).to_sparse()) is True
    csr = torch.tensor([[0.0, float("inf")], [1.0, 0.0]]).to_sparse_csr()
    assert eng.all_finite(csr) is False
    assert eng.all_finite(torch.eye(2).to_sparse_csr()) is True
    twice = torch.sparse_coo_tensor([[0, 0]], [float("inf"), float("-inf")], (2,))  # (NaN)
    assert eng.all_finite(twice) is False
