"""Read and write IDX files, the format MNIST and its relatives are distributed in.

An IDX file is a 4-byte magic number (two zero bytes, a type code, the number of dimensions),
one big-endian uint32 per dimension, then the values in C order, big-endian. Files are often
gzipped; gzip is recognised by its magic bytes, so a renamed file still loads.

This reads only raw numbers (no pickle, no code), and checks the header against the data so a
truncated download or a wrong file fails loudly with the file name, instead of producing an
array of garbage.
"""

import gzip
import os
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

_GZIP_MAGIC = b"\x1f\x8b"

# IDX type code -> big-endian dtype as stored in the file.
_DTYPES: Mapping[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODES = {dtype.newbyteorder("="): code for code, dtype in _DTYPES.items()}

# At most this many dimensions: numpy 1.x arrays cannot have more (numpy 2 allows 64).
_MAX_DIMS = 32


def load_idx(path: str | os.PathLike[str]) -> NDArray:
    """Load an IDX file, plain or gzipped, into a native-byte-order numpy array.

    Args:
        path: the file; gzip compression is detected from its first bytes, not its name.

    Returns:
        A new, writable array with the file's shape and dtype (uint8, int8, int16, int32,
        float32 or float64).

    Raises:
        ValueError: the header is malformed (magic, type code, number of dimensions) or the data
            does not match it (truncated, or trailing bytes); the message names the file.
    """
    raw = _read_bytes(path)
    dtype, shape, offset = _parse_header(raw, path)
    expected = dtype.itemsize * int(np.prod(shape, dtype=object))
    found = len(raw) - offset
    what = f"shape {tuple(shape)} of {dtype.name}"
    if found < expected:
        raise ValueError(
            f"IDX file {os.fspath(path)!r} is truncated: {what} needs {expected} bytes of data "
            f"after the {offset}-byte header, found {found}"
        )
    if found > expected:
        raise ValueError(
            f"IDX file {os.fspath(path)!r} has trailing garbage: {what} needs {expected} bytes "
            f"of data after the {offset}-byte header, found {found} ({found - expected} extra)"
        )
    data = np.frombuffer(raw, dtype=dtype, count=expected // dtype.itemsize, offset=offset)
    return data.astype(dtype.newbyteorder("=")).reshape(shape)


def save_idx(path: str | os.PathLike[str], array: NDArray, *, compress: bool | None = None) -> None:
    """Write ``array`` as an IDX file that ``load_idx`` (and any MNIST reader) can read.

    Args:
        path: the file to write.
        array: at least one dimension, dtype uint8, int8, int16, int32, float32 or float64
            (IDX has no 64-bit integers: convert labels with ``astype(np.int32)`` or uint8).
        compress: gzip the file; by default, when ``path`` ends in ``.gz``. The gzip header
            carries no timestamp, so equal arrays give equal files.

    Raises:
        ValueError: the dtype has no IDX type code, or the shape cannot be stored.
    """
    array = np.asarray(array)
    code = _CODES.get(array.dtype.newbyteorder("="))
    if code is None:
        supported = ", ".join(d.name for d in _CODES)
        raise ValueError(f"IDX cannot store dtype {array.dtype}; supported: {supported}")
    if not 1 <= array.ndim <= _MAX_DIMS:
        raise ValueError(
            f"IDX needs between 1 and {_MAX_DIMS} dimensions, got an array of shape {array.shape}"
        )
    if max(array.shape) > 0xFFFFFFFF:
        raise ValueError(f"IDX dimensions are uint32; shape {array.shape} does not fit")
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = header + np.ascontiguousarray(array, dtype=_DTYPES[code]).tobytes()
    if compress is None:
        compress = os.fspath(path).endswith(".gz")
    if compress:
        payload = gzip.compress(payload, mtime=0)
    with open(path, "wb") as f:
        f.write(payload)


def _read_bytes(path: str | os.PathLike[str]) -> bytes:
    with open(path, "rb") as f:
        raw = f.read()
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError) as error:  # gzip raises BadGzipFile (an OSError) or EOFError
        raise ValueError(f"IDX file {os.fspath(path)!r} is not valid gzip: {error}") from error


def _parse_header(raw: bytes, path: str | os.PathLike[str]) -> tuple[np.dtype, list[int], int]:
    """Return (big-endian dtype, shape, data offset) after checking the header's fields."""
    name = repr(os.fspath(path))
    if len(raw) < 4:
        raise ValueError(
            f"IDX file {name} is too short for the 4-byte magic number: {len(raw)} bytes"
        )
    if raw[0] != 0 or raw[1] != 0:
        raise ValueError(
            f"IDX file {name} has a wrong magic number {raw[:4].hex()}: the first two bytes "
            f"must be zero (is it an IDX file?)"
        )
    code, ndim = raw[2], raw[3]
    if code not in _DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _DTYPES)
        raise ValueError(f"IDX file {name} has unknown type code 0x{code:02X}; known: {known}")
    if ndim == 0:
        raise ValueError(f"IDX file {name} declares zero dimensions")
    if ndim > _MAX_DIMS:
        raise ValueError(
            f"IDX file {name} declares {ndim} dimensions; at most {_MAX_DIMS} are supported"
        )
    offset = 4 + 4 * ndim
    if len(raw) < offset:
        raise ValueError(
            f"IDX file {name} is truncated in its header: {ndim} dimensions need {offset} "
            f"header bytes, found {len(raw)}"
        )
    shape = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).tolist()
    return _DTYPES[code], shape, offset
