"""Reading event files back record by record, every CRC checked: what a resumed writer
replays (:mod:`.replay`) and how ``gradlog inspect`` tells a damaged file from a torn one.

A *torn* last record (the process died inside a write) is normal after a crash: both
TensorBoard loaders skip it, and so does this reader. A *damaged* record (a length or payload
whose CRC does not match) is not: TensorBoard's Python loader shows nothing of the file after
it, so it is reported with the file, the record's index and its byte offset.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from .record import masked_crc32c

__all__ = ["DamagedRecord", "FileCheck", "read_records", "check_file"]

_HEADER = 12  # uint64 length + masked CRC of the length
_FOOTER = 4   # masked CRC of the payload
_unpack_length = struct.Struct("<QI").unpack
_unpack_crc = struct.Struct("<I").unpack


class DamagedRecord(ValueError):
    """A record whose CRC does not match: the message names the file, record and byte."""

    def __init__(self, path: str, index: int, offset: int, reason: str) -> None:
        self.path, self.index, self.offset, self.reason = path, index, offset, reason
        super().__init__(f"{path}: record {index} (at byte {offset}) is damaged: {reason}")


def read_records(path, end: int | None = None, fileobj=None) -> Iterator[bytes]:
    """The payloads of the records of ``path`` (of its first ``end`` bytes, when given), in
    order; read from ``fileobj`` (a binary file) when given, ``path`` then only names it. A
    torn last record ends the iteration; a damaged one raises :class:`DamagedRecord`.
    """
    path = os.fspath(path)
    with (contextlib.nullcontext(fileobj) if fileobj is not None else open(path, "rb")) as f:
        offset, index = 0, 0
        while end is None or offset < end:
            header = f.read(_HEADER)
            if len(header) < _HEADER:
                return  # the end of the file, or a torn header
            length, length_crc = _unpack_length(header)
            if masked_crc32c(header[:8]) != length_crc:
                raise DamagedRecord(path, index, offset, "the length's CRC does not match")
            body = f.read(length + _FOOTER)
            if len(body) < length + _FOOTER:
                return  # a torn last record
            payload = body[:length]
            if masked_crc32c(payload) != _unpack_crc(body[length:])[0]:
                raise DamagedRecord(path, index, offset, "the payload's CRC does not match")
            yield payload
            offset += _HEADER + length + _FOOTER
            index += 1


@dataclass
class FileCheck:
    """What :func:`check_file` found: complete records, the bytes of a torn last record, and
    the first damaged record (None when there is none)."""

    records: int
    torn_bytes: int
    damage: DamagedRecord | None


def check_file(path: str | os.PathLike) -> FileCheck:
    """Read every record of ``path`` and say whether the file is whole, torn or damaged."""
    records, good = 0, 0
    try:
        for payload in read_records(path):
            records += 1
            good += _HEADER + len(payload) + _FOOTER
    except DamagedRecord as damage:
        return FileCheck(records, 0, damage)
    return FileCheck(records, os.path.getsize(path) - good, None)
