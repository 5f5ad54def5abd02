"""Record framing: the CRC32C, the mask, and files tensorboard's reader accepts."""

import os

import pytest
from tb_helpers import strict_records
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tb_masked

from gradlog.tensorboard import record


def test_crc32c_check_value_and_mask_match_tensorboard():
    assert record.masked_crc32c(b"") == tb_masked(b"")
    for data in (b"123456789", b"\x00" * 100, bytes(range(256)) * 3):
        assert record.masked_crc32c(data) == tb_masked(data)
    # The unmasked CRC-32C check value of "123456789" is 0xE3069283.
    assert record._crc32c(b"123456789") == 0xE3069283


def test_frame_is_length_crc_payload_crc_and_tensorboard_reads_it(tmp_path):
    payloads = [b"", b"x", os.urandom(70_000)]
    path = tmp_path / "events.out.tfevents.test"
    path.write_bytes(b"".join(record.frame(p) for p in payloads))
    assert list(RawEventFileLoader(str(path)).Load()) == payloads
    assert strict_records(path) == (payloads, 0)
    assert len(record.frame(b"abc")) == 8 + 4 + 3 + 4


def test_pure_python_fallback_gives_the_same_crc_and_warns(monkeypatch):
    expected = record.masked_crc32c(b"gradlog")
    monkeypatch.setattr(record, "_crc32c", None)
    with pytest.warns(RuntimeWarning, match="google-crc32c is not installed"):
        assert record.masked_crc32c(b"gradlog") == expected
    assert record.masked_crc32c(b"gradlog") == expected  # the fallback is kept, warned once
