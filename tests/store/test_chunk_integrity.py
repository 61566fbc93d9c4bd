"""Integrity by default: a loader without ``verify`` never hands out bytes other than those
committed. Every chunk is checked once, when loaded, against a checksum recorded at write
time (the attribute ``chunk_crc32c`` of each array's ``zarr.json``, in packs and segments
alike), or against its sha256 where a store records no checksum."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zstandard

from ticktensor.cli import main
from ticktensor.errors import StoreCorruptError
from ticktensor.kernels import crc32c
from ticktensor.loaders import WindowDataset
from ticktensor.store import FileEntry, Layout, Store, StoredChunk, StoreVersion

from .conftest import make_series, write_pack_of, write_series

FIXTURES = Path(__file__).parents[1] / "fixtures"
WINDOW = 8


def _store(root: Path, codec: str) -> StoreVersion:
    """One pack of 2 x 300 rows in 64-row inner chunks (10 per array, one shard each)."""
    store = Store.create(str(root), layout=Layout(codec=codec, chunk_rows=64))
    store.commit(packs=[write_pack_of(store, 0, rows=300)])
    return store.version()


def _values_chunk(version: StoreVersion, index: int) -> StoredChunk:
    (pack,) = version.packs
    return version.chunk_map(pack, "values").chunks[index]


def _read_everything(version: StoreVersion, *, verify: bool = False) -> None:
    ds = WindowDataset(version, WINDOW, verify=verify)
    ds.get_batch(np.arange(len(ds)))


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_an_undamaged_store_reads_with_the_default_check(tmp_path: Path, codec: str) -> None:
    version = _store(tmp_path / "s", codec)
    chunk = _values_chunk(version, 3)
    assert chunk.crc32c is not None
    ds = WindowDataset(version, WINDOW)
    x, _ = ds.get_batch(np.arange(len(ds)))
    expected = version.read_pack(version.packs[0], verify=True).values
    np.testing.assert_array_equal(x[0], expected[:WINDOW])


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_pack_records_its_crc32c_in_its_arrays_metadata_in_no_object_of_its_own(
    tmp_path: Path, codec: str
) -> None:
    """The CRC-32C cost no object: a pack holds its group, its 3 arrays' metadata and
    shard, and chunk_sha256's metadata and chunk (9 files, as before CRC-32C were
    recorded); plain zarr-python sees them as an attribute of each array."""
    version = _store(tmp_path / "s", codec)
    (pack,) = version.packs
    folder = tmp_path / "s" / pack.path
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert (
        on_disk
        == sorted(pack.files)
        == [
            "chunk_sha256/c/0/0/0",
            "chunk_sha256/zarr.json",
            "labels/c/0/0",
            "labels/zarr.json",
            "ts/c/0",
            "ts/zarr.json",
            "values/c/0/0",
            "values/zarr.json",
            "zarr.json",
        ]
    )
    group = zarr.open_group(str(folder), mode="r")
    assert group.attrs.asdict()["ticktensor"]["chunk_checksum"] == "chunk_crc32c"
    for array in ("ts", "values", "labels"):
        chunks = version.chunk_map(pack, array).chunks
        assert len(chunks) == 10
        stored = [
            version.location.read_range(c.rel, c.offset, c.offset + (c.nbytes or 0)) for c in chunks
        ]
        recorded = group[array].attrs.asdict()["chunk_crc32c"]
        assert recorded == [crc32c(s) for s in stored] == [c.crc32c for c in chunks]


def _edit_values_meta(root: Path, version: StoreVersion, edit: Callable[[Any], None]) -> bytes:
    """Rewrite the pack's ``values/zarr.json`` with ``edit`` (given its parsed document);
    the file's new bytes."""
    path = root / version.packs[0].path / "values/zarr.json"
    meta = json.loads(path.read_bytes())
    edit(meta)
    path.write_bytes(json.dumps(meta).encode())
    return path.read_bytes()


def test_a_forged_crc32c_list_is_caught_by_its_hash(tmp_path: Path) -> None:
    """The CRC-32C live in a file the pack's record hashes: a list changed in place is a
    hash mismatch to every reader and to ``verify``, which names the file."""
    version = _store(tmp_path / "s", "none")

    def forge(meta: Any) -> None:
        meta["attributes"]["chunk_crc32c"][3] ^= 1

    _edit_values_meta(tmp_path / "s", version, forge)
    reopened = Store.open(str(tmp_path / "s")).version()
    with pytest.raises(StoreCorruptError, match=r"values/zarr\.json\): content hash mismatch"):
        reopened.chunk_map(reopened.packs[0], "values")
    with pytest.raises(StoreCorruptError) as info:
        Store.open(str(tmp_path / "s")).verify()
    assert [p for p, _ in info.value.problems] == [f"{version.packs[0].path}/values/zarr.json"]
    assert "pack 2024-01-02 file values/zarr.json: content hash mismatch" in str(info.value)


@pytest.mark.parametrize(
    ("crcs", "why"),
    [
        (None, "is None"),
        ([1, 2], r"is \[1, 2\]"),
        ([None] * 10, r"is \[None"),
        (["0"] * 10, r"is \['0'"),
        ([1 << 32] * 10, r"is \[4294967296"),
    ],
)
def test_a_pack_that_says_it_records_crc32c_must_list_one_per_chunk(
    tmp_path: Path, crcs: object, why: str
) -> None:
    """A pack whose group says it records CRC-32C is refused when an array lists none (a
    reader would otherwise check that array's chunks no more), or not one per chunk."""
    version = _store(tmp_path / "s", "none")

    def edit(meta: Any) -> None:
        if crcs is None:
            del meta["attributes"]["chunk_crc32c"]
        else:
            meta["attributes"]["chunk_crc32c"] = crcs

    raw = _edit_values_meta(tmp_path / "s", version, edit)
    (pack,) = version.packs
    files = {**pack.files, "values/zarr.json": FileEntry(hashlib.sha256(raw).hexdigest(), len(raw))}
    forged = dataclasses.replace(pack, files=files)  # a record vouching for the file
    with pytest.raises(
        StoreCorruptError,
        match=rf"pack 2024-01-02 array 'values' .*: attribute chunk_crc32c {why}.*, expected "
        r"one CRC-32C for each of the 10 chunks",
    ):
        version.chunk_map(forged, "values")


def _forge_crc32c(root: Path, kind: str, array: str, chunk: int) -> str:
    """Change the CRC-32C that the latest version's first ``kind`` (``packs`` or
    ``segments``) records for ``chunk`` of ``array``, and rewrite every hash that vouches
    for it (the record's entry of the ``zarr.json``, the log entry, the pointer): the
    chunks still match their sha256, the CRC-32C no longer match the chunk. The key of
    the forged ``zarr.json`` in the record."""
    pointer = json.loads((root / "latest.json").read_text())
    entry = root / pointer["manifest"]
    doc = json.loads(entry.read_bytes())
    record = doc[kind][0]
    meta_path = root / record["path"] / array / "zarr.json"
    meta = json.loads(meta_path.read_bytes())
    meta["attributes"]["chunk_crc32c"][chunk] ^= 0x5A5A
    raw = json.dumps(meta).encode()
    meta_path.write_bytes(raw)
    record["files"][f"{array}/zarr.json"] = [hashlib.sha256(raw).hexdigest(), len(raw)]
    data = json.dumps(doc, sort_keys=True).encode()
    entry.write_bytes(data)
    pointer["sha256"] = hashlib.sha256(data).hexdigest()
    (root / "latest.json").write_text(json.dumps(pointer))
    return f"{record['path']}/{array}/zarr.json"


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_verify_names_a_chunk_whose_recorded_crc32c_is_not_its_own(
    tmp_path: Path, codec: str
) -> None:
    """Every hash of the pack matches (rewritten), but the CRC-32C recorded for chunk 3 of
    ``values`` is not that chunk's: ``verify`` names the chunk, as a default read does."""
    root = tmp_path / "s"
    version = _store(root, codec)
    shard = _values_chunk(version, 3).rel
    _forge_crc32c(root, "packs", "values", 3)
    with pytest.raises(StoreCorruptError) as info:
        Store.open(str(root)).verify()
    message = str(info.value)
    assert [p for p, _ in info.value.problems] == [shard], message
    assert re.search(
        r"pack 2024-01-02 file values/c/0/0 chunk 3 \(bytes \d+\+\d+\): crc32c \w{8} != "
        r"\w{8} recorded in values/zarr\.json, and the chunk matches its sha256",
        message,
    ), message
    assert main(["verify", str(root), "--quiet"]) == 1
    with pytest.raises(StoreCorruptError, match=r"chunk 3 of pack 2024-01-02\): crc32c"):
        _read_everything(Store.open(str(root)).version())


def test_verify_names_a_segment_chunk_whose_recorded_crc32c_is_not_its_own(
    tmp_path: Path,
) -> None:
    root = tmp_path / "s"
    store = Store.create(str(root), layout=Layout(codec="none", chunk_rows=64))
    store.commit(segments=[write_series(store, make_series("AAA", 0, rows=300))])
    _forge_crc32c(root, "segments", "labels", 2)
    with pytest.raises(StoreCorruptError) as info:
        Store.open(str(root)).verify()
    segment = store.version().segments[0].path
    assert [p for p, _ in info.value.problems] == [f"{segment}/labels/c/2/0"]
    assert re.search(
        r"segment AAA/2024-01-02 chunk labels/c/2/0: crc32c \w{8} != \w{8} recorded in "
        r"labels/zarr\.json, and the chunk matches its sha256",
        str(info.value),
    ), str(info.value)


def test_a_flipped_byte_in_a_zstd_chunk_is_named(tmp_path: Path) -> None:
    version = _store(tmp_path / "s", "zstd")
    chunk = _values_chunk(version, 4)
    assert chunk.nbytes is not None
    path = tmp_path / "s" / chunk.rel
    data = bytearray(path.read_bytes())
    data[chunk.offset + chunk.nbytes // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError) as info:
        _read_everything(version)
    message = str(info.value)
    assert str(path) in message
    assert "chunk 4 of pack 2024-01-02" in message
    assert "crc32c" in message


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_swapped_shard_index_entries_are_named(tmp_path: Path, codec: str) -> None:
    version = _store(tmp_path / "s", codec)
    path = tmp_path / "s" / _values_chunk(version, 0).rel
    data = bytearray(path.read_bytes())
    size = len(data)
    index = np.frombuffer(bytes(data[-16 * 10 :]), dtype="<u8").reshape(10, 2).copy()
    index[[2, 5]] = index[[5, 2]]
    data[-16 * 10 :] = index.tobytes()
    path.write_bytes(bytes(data))
    assert path.stat().st_size == size
    with pytest.raises(StoreCorruptError) as info:
        _read_everything(version)
    # Named when the pack is opened (entries out of order) or when the chunk is loaded.
    message = str(info.value)
    assert "values/c/0/0" in message
    assert re.search(r"chunk [25]\b", message)


def test_raw_chunks_swapped_in_place_are_named(tmp_path: Path) -> None:
    """Two equal-size raw chunks exchanged in their shard: index and sizes unchanged."""
    version = _store(tmp_path / "s", "none")
    two, five = _values_chunk(version, 2), _values_chunk(version, 5)
    assert two.nbytes == five.nbytes
    assert two.nbytes is not None
    path = tmp_path / "s" / two.rel
    data = bytearray(path.read_bytes())
    a, b = slice(two.offset, two.offset + two.nbytes), slice(five.offset, five.offset + two.nbytes)
    data[a], data[b] = data[b], data[a]
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError) as info:
        _read_everything(version)
    message = str(info.value)
    assert str(path) in message
    assert re.search(r"chunk [25] of pack 2024-01-02\): crc32c", message)


def test_new_zstd_chunks_carry_the_frame_checksum(tmp_path: Path) -> None:
    version = _store(tmp_path / "s", "zstd")
    chunk = _values_chunk(version, 1)
    assert chunk.nbytes is not None
    frame = (tmp_path / "s" / chunk.rel).read_bytes()[chunk.offset : chunk.offset + chunk.nbytes]
    assert zstandard.get_frame_parameters(frame).has_checksum


@pytest.mark.parametrize(
    ("fixture", "pack"), [("store-v1", False), ("store-v2", False), ("store-v2", True)]
)
def test_older_stores_fall_back_to_their_sha256(tmp_path: Path, fixture: str, pack: bool) -> None:
    root = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, root)
    version = Store.open(str(root)).version()
    records = version.packs if pack else version.segments
    chunk = version.chunk_map(records[0], "values").chunks[0]
    assert chunk.crc32c is None
    assert chunk.sha256 is not None
    _read_everything(version)  # the recorded sha256 of every chunk matches
    path = root / chunk.rel
    data = bytearray(path.read_bytes())
    data[chunk.offset + 5] ^= 0x01  # a raw chunk's float, or a zstd frame's header
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError) as info:
        _read_everything(version)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_read_pack_checks_each_chunk_by_default(tmp_path: Path, codec: str) -> None:
    version = _store(tmp_path / "s", codec)
    chunk = _values_chunk(version, 6)
    assert chunk.nbytes is not None
    path = tmp_path / "s" / chunk.rel
    data = bytearray(path.read_bytes())
    data[chunk.offset + chunk.nbytes - 9] ^= 0x10  # a raw float, or the zstd frame's end
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match=r"\(values chunk 6 of pack .*\): crc32c \w+ !="):
        version.read_pack(version.packs[0])


def test_new_segments_record_a_crc32c_per_chunk(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"), layout=Layout(codec="none", chunk_rows=64))
    store.commit(segments=[write_series(store, make_series("AAA", 0, rows=300))])
    version = store.version()
    chunk = version.chunk_map(version.segments[0], "values").chunks[2]
    assert chunk.crc32c is not None
    path = tmp_path / "s" / chunk.rel
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match=rf"{re.escape(str(path))}: crc32c \w+ != \w+"):
        _read_everything(version)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_read_segment_checks_each_chunk_by_default(tmp_path: Path, codec: str) -> None:
    """A segment read whole through zarr-python (behind the chunk guard) checks each chunk
    file against its CRC-32C, as ``read_pack`` does, before zarr decodes it."""
    store = Store.create(str(tmp_path / "s"), layout=Layout(codec=codec, chunk_rows=64))
    store.commit(segments=[write_series(store, make_series("AAA", 0, rows=300))])
    version = store.version()
    (segment,) = version.segments
    expected = version.read_segment(segment).values
    path = tmp_path / "s" / version.chunk_map(segment, "values").chunks[2].rel
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # a raw float, or a byte inside the zstd frame
    path.write_bytes(bytes(data))
    with pytest.raises(
        StoreCorruptError,
        match=r"segment AAA/2024-01-02 chunk values/c/2/0: crc32c \w{8} != \w{8} recorded",
    ):
        version.read_segment(segment)
    with pytest.raises(StoreCorruptError, match=r"values/c/2/0: content hash mismatch"):
        version.read_segment(segment, verify=True)
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    np.testing.assert_array_equal(version.read_segment(segment).values, expected)
