"""Chunk loading for every codec and store location, against zarr-python; damaged chunks."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import zarr

from ticktensor import DataLoader
from ticktensor.errors import StoreCorruptError
from ticktensor.loaders import BlockShuffleOrder, FastOptions, WindowDataset
from ticktensor.loaders._chunks import ChunkFile, ChunkLoader
from ticktensor.store import Codec, StoreVersion
from ticktensor.store.codecs import codec_for

from .test_dataset import FEATURES, build_store

WINDOW = 6


def codec_store(url: str, codec: Codec, chunk_rows: int = 16) -> StoreVersion:
    return build_store(url, chunk_rows=chunk_rows, stats=False, codec=codec.value)


def zarr_windows(ds: WindowDataset, indices: np.ndarray) -> np.ndarray:
    """The reference: every window sliced from arrays zarr-python read."""
    sources = []
    for run in ds.records:
        parts = [
            zarr.open_array(ds.version.file_url(f"{r.path}/values"), mode="r")[...] for r in run
        ]
        sources.append(np.concatenate(parts))
    return np.stack(
        [
            sources[ds.sample_segment[i]][ds.sample_start[i] : ds.sample_start[i] + ds.window]
            for i in indices
        ]
    )


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("cross_gaps", [False, True])
def test_every_codec_reads_what_zarr_reads(tmp_path: Path, codec: Codec, cross_gaps: bool) -> None:
    version = codec_store(str(tmp_path / "store"), codec)
    ds = WindowDataset(version, WINDOW, cross_gaps=cross_gaps, threads=2)
    everything = np.arange(len(ds))
    np.testing.assert_array_equal(ds.get_batch(everything)[0], zarr_windows(ds, everything))
    assert {f.stored.codec for f in ds.chunks.files} == {codec_for(codec.value)}
    stats = ds.cache_stats()
    # A chunk holding only unlabelled last rows starts no window and is never loaded.
    assert stats["loads"] == len(ds.chunks_of(everything)) >= len(ds.chunks) - len(ds.records)
    assert stats["bytes_read"] > 0


@pytest.mark.parametrize("codec", list(Codec))
def test_labels_read_at_open_are_what_zarr_reads(tmp_path: Path, codec: Codec) -> None:
    # chunk_rows 7 leaves a partial last chunk in every segment.
    version = codec_store(str(tmp_path / "store"), codec, chunk_rows=7)
    loader = ChunkLoader(version, None, None)
    for record in version.segments:
        fast = loader.reader.read_array(record, "labels")
        reference = zarr.open_array(version.file_url(f"{record.path}/labels"), mode="r")[...]
        assert fast is not None
        np.testing.assert_array_equal(fast, reference)
    ds = WindowDataset(version, WINDOW, threads=2)
    labels = np.concatenate(
        [
            zarr.open_array(ds.version.file_url(f"{r.path}/labels"), mode="r")[...]
            for run in ds.records
            for r in run
        ]
    )
    np.testing.assert_array_equal(np.concatenate(ds.labels_sources), labels)


def test_chunks_of_nan_that_zarr_did_not_write_read_as_nan(tmp_path: Path) -> None:
    version = codec_store(str(tmp_path / "store"), Codec.ZSTD, chunk_rows=4)
    # The labels' horizon leaves the last rows NaN: Zarr skips chunks holding only NaN.
    skipped = [
        (record, k)
        for record in version.segments
        for k in range(-(-record.rows // 4))
        if f"labels/c/{k}/0" not in record.files
    ]
    assert skipped, "the fixture should have an all-NaN label chunk"
    loader = ChunkLoader(version, None, None)
    for record, k in skipped:
        labels = loader.reader.read_array(record, "labels")
        reference = zarr.open_array(version.file_url(f"{record.path}/labels"), mode="r")[...]
        assert labels is not None
        assert np.isnan(labels[k * 4 : (k + 1) * 4]).all()
        np.testing.assert_array_equal(labels, reference)
    # A feature chunk of NaN alone is skipped too; it reads as NaN, not as a lost chunk.
    record = version.segments[0]
    values = zarr.open_array(version.file_url(f"{record.path}/values"), mode="r+")
    values[4:8] = np.nan
    del record.files["values/c/1/0"]
    (Path(version.location.path(f"{record.path}/values/c/1/0"))).unlink(missing_ok=True)
    stored = version.chunk_map(record, "values").chunks[1]
    window = ChunkLoader(version, None, None).load(ChunkFile(stored, 0, stored.rows))[0]
    assert np.isnan(window).all()


def test_a_remote_store_is_read_through_fsspec() -> None:
    url = f"memory://chunks-{uuid.uuid4().hex}/store"
    version = codec_store(url, Codec.ZSTD)
    ds = WindowDataset(version, WINDOW, threads=2)
    idx = np.arange(0, len(ds), 3)
    np.testing.assert_array_equal(ds.get_batch(idx)[0], zarr_windows(ds, idx))


def test_a_small_cache_evicts_and_batches_stay_exact(tmp_path: Path) -> None:
    version = codec_store(str(tmp_path / "store"), Codec.LZ4, chunk_rows=8)
    budget = 3 * 8 * len(FEATURES) * 4  # three chunks
    ds = WindowDataset(version, WINDOW, cache_bytes=budget, threads=2)
    loader = DataLoader(
        ds, batch_size=4, fast=FastOptions(order=BlockShuffleOrder(seed=2, block_chunks=1))
    )
    seen, expected = [], []
    order = BlockShuffleOrder(seed=2, block_chunks=1).order(ds, 0)
    for step, (x, _) in enumerate(loader):
        seen.append(x.clone())
        expected.append(zarr_windows(ds, order[step * 4 : step * 4 + 4]))
    np.testing.assert_array_equal(np.concatenate(seen), np.concatenate(expected))
    stats = loader.stats()["cache"]
    assert stats["evictions"] > 0
    assert stats["recycled"] > 0  # evicted buffers were decoded into again, still exact
    assert stats["peak_bytes"] <= budget or stats["over_budget"] > 0
    assert ds.cache.used_bytes <= budget


def test_normalize_and_feature_subset_apply_per_chunk(tmp_path: Path) -> None:
    version = codec_store(str(tmp_path / "store"), Codec.NONE)
    plain = WindowDataset(version, WINDOW)
    ds = WindowDataset(version, WINDOW, features=["f3", "f1"], cache_bytes=4096)
    idx = np.arange(len(ds))
    np.testing.assert_array_equal(ds.get_batch(idx)[0], plain.get_batch(idx)[0][:, :, [3, 1]])
    # The mapped chunk files were not written to.
    np.testing.assert_array_equal(plain.get_batch(idx)[0], zarr_windows(plain, idx))


def chunk_path(version: StoreVersion, chunk: int = 1) -> Path:
    ds = WindowDataset(version, WINDOW)
    return Path(version.file_url(ds.chunks.files[chunk].rel))


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD])
def test_a_missing_chunk_is_named_in_the_consumer(tmp_path: Path, codec: Codec) -> None:
    version = codec_store(str(tmp_path / "store"), codec)
    path = chunk_path(version)
    os.remove(path)
    ds = WindowDataset(version, WINDOW)
    with pytest.raises(StoreCorruptError, match="chunk 1 of segment AAA/2024-01-02 is missing"):
        for _ in DataLoader(ds, batch_size=8):
            pass


def test_damaged_chunks_fail_with_their_name(tmp_path: Path) -> None:
    version = codec_store(str(tmp_path / "zstd"), Codec.ZSTD)
    path = chunk_path(version)
    data = bytearray(path.read_bytes())
    data[len(data) // 2 :] = bytes(len(data) - len(data) // 2)
    path.write_bytes(bytes(data))
    # Each chunk is checked against its CRC-32C when it is loaded, before it is decoded.
    with pytest.raises(StoreCorruptError, match=f"{path}: crc32c \\w+ != \\w+ recorded") as info:
        WindowDataset(version, WINDOW).get_batch(np.arange(20))
    assert any("while loading chunk 1" in note for note in info.value.__notes__)

    raw = codec_store(str(tmp_path / "raw"), Codec.NONE)
    path = chunk_path(raw)
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(StoreCorruptError, match="raw chunk of 252 bytes, expected 256"):
        WindowDataset(raw, WINDOW).get_batch(np.arange(20))


def test_verify_catches_bytes_altered_in_place(tmp_path: Path) -> None:
    version = codec_store(str(tmp_path / "store"), Codec.NONE)
    path = chunk_path(version)
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match=r"crc32c \w+ != \w+ recorded when the chunk"):
        WindowDataset(version, WINDOW).get_batch(np.arange(20))
    with pytest.raises(StoreCorruptError, match=r"sha256 \w+ != \w+ recorded for the chunk"):
        WindowDataset(version, WINDOW, verify=True).get_batch(np.arange(20))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD])
def test_loaded_chunks_hold_no_file_descriptors(tmp_path: Path, codec: Codec) -> None:
    version = codec_store(str(tmp_path / "store"), codec, chunk_rows=4)
    before = len(os.listdir("/proc/self/fd"))
    ds = WindowDataset(version, WINDOW, threads=2)
    everything = np.arange(len(ds))
    np.testing.assert_array_equal(ds.get_batch(everything)[0], zarr_windows(ds, everything))
    assert ds.cache_stats()["loaded_chunks"] > 30
    # A loaded chunk holds no open file (a cache of thousands would hit the limit).
    assert len(os.listdir("/proc/self/fd")) - before < 8


_INFLATED = """
import resource, sys
import numpy as np
from ticktensor.errors import StoreCorruptError
from ticktensor.loaders import WindowDataset
from ticktensor.store import Store

version = Store.open(sys.argv[1]).version()
ds = WindowDataset(version, 6, verify="none")
with open("/proc/self/statm") as f:
    size = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), resource.RLIM_INFINITY))
try:
    ds.get_batch(np.arange(20))
except StoreCorruptError as exc:
    print("StoreCorruptError:", exc)
"""


def test_an_inflated_compressed_chunk_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A segment's zstd chunk file grown to 4 GiB (sparse) is named, not read into memory."""
    version = codec_store(str(tmp_path / "store"), Codec.ZSTD)
    path = chunk_path(version)
    os.truncate(path, 4 << 30)
    done = subprocess.run(
        [sys.executable, "-c", _INFLATED, str(tmp_path / "store")],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{path}: zstd chunk of 4,294,967,296 bytes, more than any frame" in done.stdout
