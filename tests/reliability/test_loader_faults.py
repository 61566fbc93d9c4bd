"""Stored-data faults seen through the public loader API name the damaged chunk file.

Each test builds ``WindowDataset(version, window)`` and iterates
``ticktensor.DataLoader`` inside one ``pytest.raises`` block, so it holds whether the
loader reads chunks when the dataset is built or lazily while iterating.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ticktensor import DataLoader
from ticktensor.errors import StoreCorruptError
from ticktensor.loaders import WindowDataset
from ticktensor.store import Store

from .conftest import segment_store

CHUNK = "values/c/1/0"


@pytest.fixture(scope="module", params=["none", "zstd"])
def pristine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp(f"loader-{request.param}") / "s"
    return segment_store(root, request.param)


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "s"
    shutil.copytree(pristine, copy)
    return copy


def _chunk(store: Path) -> Path:
    seg = Store.open(str(store)).version().segments[0]
    return store / seg.path / CHUNK


def _consume(store: Path) -> None:
    dataset = WindowDataset(Store.open(str(store)).version(), 32)
    for _ in DataLoader(dataset, batch_size=64):
        pass


def test_intact_store_reads(store: Path) -> None:
    _consume(store)


def test_altered_chunk_is_named(store: Path) -> None:
    """Every chunk is checked when loaded (its sha256 here: segments record no CRC-32C),
    so a same-size alteration of a raw chunk is named too."""
    path = _chunk(store)
    data = bytearray(path.read_bytes())
    for i in range(0, len(data), 97):
        data[i] ^= 0x5A  # same size, other bytes
    path.write_bytes(bytes(data))
    with pytest.raises((StoreCorruptError, OSError), match=CHUNK):
        _consume(store)


def test_verify_names_any_altered_chunk(store: Path) -> None:
    """``WindowDataset(verify=True)`` hashes every chunk it loads, raw ones included."""
    path = _chunk(store)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit, same size
    path.write_bytes(bytes(data))
    dataset = WindowDataset(Store.open(str(store)).version(), 32, verify=True)
    with pytest.raises(StoreCorruptError, match=CHUNK):
        for _ in DataLoader(dataset, batch_size=64):
            pass


def test_io_error_reading_a_chunk_is_named(store: Path) -> None:
    path = _chunk(store)
    path.unlink()
    path.mkdir()  # reading it fails with an OS error (EISDIR), as a bad disk would
    with pytest.raises((StoreCorruptError, OSError), match=CHUNK):
        _consume(store)


def test_missing_chunk_is_named(store: Path) -> None:
    _chunk(store).unlink()
    with pytest.raises((StoreCorruptError, OSError), match=CHUNK):
        _consume(store)


def test_truncated_chunk_is_named(store: Path) -> None:
    path = _chunk(store)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises((StoreCorruptError, OSError), match=CHUNK):
        _consume(store)
