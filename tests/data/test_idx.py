"""Tests for the IDX reader and writer: the byte layout, round trips and malformed files."""

import gzip
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gradlog.data.idx import load_idx, save_idx

DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64]


def _extremes(dtype) -> np.ndarray:
    """Values that break a wrong byte order or width: limits, signs, non-finite floats."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.array([info.min, info.max, 0, 1, info.max // 3, info.min // 7], dtype=dtype)
    info = np.finfo(dtype)
    return np.array([info.min, info.max, info.tiny, -0.0, np.inf, -np.nan, 1 / 3], dtype=dtype)


def _bits(array: np.ndarray) -> bytes:
    """The values' native bytes, so NaN payloads and -0.0 count as differences."""
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("=")).tobytes()


def _write(path: Path, raw: bytes) -> Path:
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["values.idx", "values.idx.gz"])
def test_round_trip_keeps_values_shape_and_dtype(tmp_path, dtype, name):
    array = np.resize(_extremes(dtype), (3, 2, 5))
    save_idx(tmp_path / name, array)
    loaded = load_idx(tmp_path / name)
    assert loaded.dtype == np.dtype(dtype) and loaded.dtype.isnative
    assert loaded.shape == (3, 2, 5)
    assert _bits(loaded) == _bits(array)
    assert loaded.flags.writeable and loaded.flags.c_contiguous
    compressed = (tmp_path / name).read_bytes()[:2] == b"\x1f\x8b"
    assert compressed == name.endswith(".gz")


def test_writes_the_documented_byte_layout(tmp_path):
    save_idx(tmp_path / "a.idx", np.array([[1, 2, 3], [4, 5, 255]], dtype=np.uint8))
    assert (tmp_path / "a.idx").read_bytes() == (
        b"\x00\x00\x08\x02"
        + b"\x00\x00\x00\x02"
        + b"\x00\x00\x00\x03"
        + bytes([1, 2, 3, 4, 5, 255])
    )
    save_idx(tmp_path / "b.idx", np.array([-2, 258], dtype="<i2"))  # stored big-endian
    assert (tmp_path / "b.idx").read_bytes() == b"\x00\x00\x0b\x01\x00\x00\x00\x02\xff\xfe\x01\x02"
    save_idx(tmp_path / "c.idx", np.array([1.5], dtype=np.float32))
    assert (tmp_path / "c.idx").read_bytes()[-4:] == b"\x3f\xc0\x00\x00"


def test_reads_an_mnist_style_label_file_written_by_hand(tmp_path):
    raw = b"\x00\x00\x08\x01\x00\x00\x00\x04" + bytes([7, 2, 1, 0])
    labels = load_idx(_write(tmp_path / "t10k-labels-idx1-ubyte", raw))
    assert labels.dtype == np.uint8 and labels.tolist() == [7, 2, 1, 0]
    raw = b"\x00\x00\x0c\x02\x00\x00\x00\x01\x00\x00\x00\x02" + b"\x80\x00\x00\x00\x00\x00\x01\x00"
    values = load_idx(_write(tmp_path / "ints.idx", raw))
    assert values.dtype == np.int32 and values.tolist() == [[-(2**31), 256]]


def test_gzip_is_detected_by_magic_bytes_not_by_name(tmp_path):
    array = np.arange(12, dtype=np.int16).reshape(3, 4)
    save_idx(tmp_path / "packed.idx", array, compress=True)
    assert (tmp_path / "packed.idx").read_bytes()[:2] == b"\x1f\x8b"
    assert np.array_equal(load_idx(tmp_path / "packed.idx"), array)
    save_idx(tmp_path / "plain.gz", array, compress=False)
    assert np.array_equal(load_idx(str(tmp_path / "plain.gz")), array)


def test_gzip_output_is_reproducible(tmp_path):
    array = np.arange(100, dtype=np.float64)
    save_idx(tmp_path / "a.idx.gz", array)
    save_idx(tmp_path / "b.idx.gz", array)
    assert (tmp_path / "a.idx.gz").read_bytes() == (tmp_path / "b.idx.gz").read_bytes()


def test_empty_dimensions_round_trip(tmp_path):
    save_idx(tmp_path / "empty.idx", np.zeros((0, 28, 28), dtype=np.uint8))
    assert load_idx(tmp_path / "empty.idx").shape == (0, 28, 28)


HEADER_2x3_U8 = b"\x00\x00\x08\x02\x00\x00\x00\x02\x00\x00\x00\x03"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "too short for the 4-byte magic number: 0 bytes"),
        (b"\x00\x00\x08", "too short for the 4-byte magic number: 3 bytes"),
        (b"\x01\x00\x08\x01\x00\x00\x00\x01\x05", "wrong magic number 01000801"),
        (b"\x00\x07\x08\x01\x00\x00\x00\x01\x05", "first two bytes must be zero"),
        (b"\x00\x00\x0a\x01\x00\x00\x00\x01\x05", "unknown type code 0x0A"),
        (b"\x00\x00\x08\x00\x05", "zero dimensions"),
        (b"\x00\x00\x08\x21" + b"\x00" * 200, "33 dimensions; at most 32"),
        (b"\x00\x00\x08\x03\x00\x00\x00\x02", "3 dimensions need 16 header bytes, found 8"),
        (HEADER_2x3_U8 + bytes(5), "truncated: shape (2, 3) of uint8 needs 6 bytes"),
        (HEADER_2x3_U8 + bytes(7), "trailing garbage"),
    ],
)
def test_malformed_files_raise_value_error_naming_file_and_problem(tmp_path, raw, message):
    path = _write(tmp_path / "broken.idx", raw)
    with pytest.raises(ValueError, match="broken.idx") as info:
        load_idx(path)
    assert message in str(info.value)
    # The same file gzipped fails the same way.
    gz = _write(tmp_path / "broken.idx.gz", gzip.compress(raw))
    with pytest.raises(ValueError, match="broken.idx.gz") as info:
        load_idx(gz)
    assert message in str(info.value)


def test_truncated_data_reports_expected_and_found_bytes(tmp_path):
    save_idx(tmp_path / "full.idx", np.ones((10, 4, 4), dtype=np.float32))
    raw = (tmp_path / "full.idx").read_bytes()
    assert len(raw) == 16 + 640
    with pytest.raises(ValueError) as info:
        load_idx(_write(tmp_path / "cut.idx", raw[:-100]))
    message = str(info.value)
    assert "cut.idx" in message and "truncated" in message
    assert "needs 640 bytes" in message and "found 540" in message


def test_trailing_garbage_reports_the_extra_bytes(tmp_path):
    save_idx(tmp_path / "full.idx", np.ones(5, dtype=np.int16))
    raw = (tmp_path / "full.idx").read_bytes() + b"junk"
    with pytest.raises(ValueError, match=r"needs 10 bytes .* found 14 \(4 extra\)"):
        load_idx(_write(tmp_path / "long.idx", raw))


def test_corrupt_gzip_raises_value_error(tmp_path):
    raw = gzip.compress(HEADER_2x3_U8 + bytes(6))[:-10]
    with pytest.raises(ValueError, match="not valid gzip"):
        load_idx(_write(tmp_path / "cut.idx.gz", raw))


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros(3, dtype=np.int64), "cannot store dtype int64"),
        (np.zeros(3, dtype=bool), "cannot store dtype bool"),
        (np.zeros(3, dtype=np.float16), "cannot store dtype float16"),
        (np.array(5, dtype=np.uint8), "got an array of shape ()"),
    ],
)
def test_save_rejects_what_idx_cannot_hold(tmp_path, array, message):
    with pytest.raises(ValueError) as info:
        save_idx(tmp_path / "x.idx", array)
    assert message in str(info.value)
    assert not (tmp_path / "x.idx").exists()


@settings(deadline=None, max_examples=150)
@given(
    array=hnp.arrays(
        dtype=st.sampled_from(DTYPES).flatmap(
            lambda dt: st.sampled_from([np.dtype(dt), np.dtype(dt).newbyteorder()])
        ),
        shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5),
    ),
    compress=st.booleans(),
)
def test_round_trip_property(array, compress):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "data.idx"
        save_idx(path, array, compress=compress)
        loaded = load_idx(path)
    assert loaded.shape == array.shape
    assert loaded.dtype == array.dtype.newbyteorder("=")
    assert _bits(loaded) == _bits(array)
