"""The limits on tiny inputs: positive rates, page cache eviction measured by mincore."""

from __future__ import annotations

from pathlib import Path

import numcodecs
import numpy as np
import pytest

from ticktensor.bench.limits import (
    decode_gbps,
    evict,
    first_epoch_gbps,
    memcpy_gbps,
    resident_fraction,
    sequential_read_gbps,
)


def test_memcpy_rates_are_positive() -> None:
    assert memcpy_gbps(1, threads=1, repeats=1) > 0
    assert memcpy_gbps(1, threads=2, repeats=1) > 0


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_decode_rate_counts_decoded_bytes(codec: str) -> None:
    data = np.random.default_rng(0).standard_normal(4096, dtype=np.float32).tobytes()
    encoder = (
        numcodecs.Zstd(level=1) if codec == "zstd" else numcodecs.Blosc(cname="lz4", shuffle=0)
    )
    payloads = [encoder.encode(data)] * 4
    assert decode_gbps(codec, payloads, threads=1, seconds=0.01) > 0
    assert decode_gbps(codec, payloads, threads=2, seconds=0.01) > 0
    with pytest.raises(ValueError, match="no decode step"):
        decode_gbps("none", payloads)


def test_sequential_read_and_eviction(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * (1 << 20))
    assert sequential_read_gbps([path], block=1 << 16) > 0
    before = resident_fraction([path])
    evict([path])
    after = resident_fraction([path])
    if before is not None and after is not None:
        assert 0.0 <= after <= 1.0
        assert after <= before


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_first_epoch_rate_reads_and_decodes_every_file(codec: str, tmp_path: Path) -> None:
    data = np.random.default_rng(0).standard_normal(1 << 16, dtype=np.float32).tobytes()
    encoder = (
        numcodecs.Zstd(level=1) if codec == "zstd" else numcodecs.Blosc(cname="lz4", shuffle=0)
    )
    files = []
    for k in range(5):
        path = tmp_path / f"c{k}"
        path.write_bytes(encoder.encode(data))
        files.append((path, len(data)))
    assert first_epoch_gbps(codec, files, threads=2) > 0
    files[3][0].write_bytes(b"not a chunk" * 100)  # every file is decoded: this one fails
    with pytest.raises(RuntimeError):
        first_epoch_gbps(codec, files, threads=2)
