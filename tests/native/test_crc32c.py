"""CRC-32C and checked reads against a slow reference (the bit-by-bit definition)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ticktensor.kernels import crc32c, read_checked


def _table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def reference(data: bytes, value: int = 0) -> int:
    crc = value ^ 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def test_the_check_value_of_the_standard() -> None:
    assert crc32c(b"123456789") == 0xE3069283 == reference(b"123456789")
    assert crc32c(b"") == 0


@pytest.mark.parametrize("size", [1, 7, 8, 9, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 5, 100_003])
def test_any_length_and_continuation_equal_the_reference(size: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    assert crc32c(data) == reference(data)
    cut = size // 3
    assert crc32c(data[cut:], crc32c(data[:cut])) == reference(data)


def test_read_checked_reads_and_checks_a_range_and_stops_at_the_end(tmp_path: Path) -> None:
    data = np.random.default_rng(1).integers(0, 256, 600_000, dtype=np.uint8).tobytes()
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        out = np.zeros(300_000, dtype=np.uint8)
        assert read_checked(fd, 1_000, out) == (300_000, reference(data[1_000:301_000]))
        assert out.tobytes() == data[1_000:301_000]
        assert read_checked(fd, 1_000, out, checksum=False) == (300_000, 0)
        done, crc = read_checked(fd, 500_000, out)  # the file ends first
        assert (done, crc) == (100_000, reference(data[500_000:]))
    finally:
        os.close(fd)
