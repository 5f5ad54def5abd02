"""TFRecord framing: the only byte layout gradlog writes by hand.

A record is ``uint64 length | masked CRC32C(length) | payload | masked CRC32C(payload)``, all
little-endian. The payload (a serialized ``Event``) comes from the tensorboard protos; this module
only frames it. ``frame`` returns the whole record as one ``bytes`` so the caller can hand it to
the file in a single write: a crash then leaves at most a truncated last record, which both
TensorBoard loaders skip and pick up once it is complete.

The CRC is google-crc32c's C implementation (~22 GB/s). Without it we fall back to tensorboard's
pure-Python CRC (~5 MB/s: fine for scalars, slow for images) and say so once.
"""

from __future__ import annotations

import struct
import warnings

__all__ = ["frame", "masked_crc32c", "CRC_IMPLEMENTATION"]

try:
    import google_crc32c

    _crc32c = google_crc32c.value
    CRC_IMPLEMENTATION = f"google-crc32c ({google_crc32c.implementation})"
except ImportError:  # pragma: no cover - exercised by monkeypatching in the tests
    _crc32c = None
    CRC_IMPLEMENTATION = "tensorboard (pure Python)"

_pack_u64 = struct.Struct("<Q").pack
_pack_u32 = struct.Struct("<I").pack
_MASK_DELTA = 0xA282EAD8


def _fallback_crc32c(data: bytes) -> int:
    # NOTE: imported on first use only: the stub package pulls in ~300 modules (~0.15 s).
    global _crc32c
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c

    warnings.warn(
        "google-crc32c is not installed; gradlog uses tensorboard's pure-Python CRC32C, "
        "which is slow for large records (images). `pip install google-crc32c` fixes it.",
        RuntimeWarning,
        stacklevel=3,
    )
    _crc32c = crc32c
    return crc32c(data)


def masked_crc32c(data: bytes) -> int:
    """The CRC32C of ``data``, rotated and offset as the TFRecord format requires."""
    crc = (_crc32c or _fallback_crc32c)(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


_headers: dict[int, bytes] = {}  # length -> length + its masked CRC (records repeat lengths)


def frame(payload: bytes) -> bytes:
    """Frame one serialized event as a complete TFRecord (one ``bytes`` object)."""
    size = len(payload)
    header = _headers.get(size)
    if header is None:
        length = _pack_u64(size)
        header = length + _pack_u32(masked_crc32c(length))
        if len(_headers) < 4096:
            _headers[size] = header
    crc = (_crc32c or _fallback_crc32c)(payload)  # masked_crc32c, inlined: scalars are hot
    return header + payload + _pack_u32((((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF)
