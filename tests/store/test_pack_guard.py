"""Nothing read from a pack is trusted: forged paths, shard indexes and chunk frames.

The forged stores are self-consistent (the log entry and the pointer vouch for the forged
files), so only the structural checks can stop them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard

from ticktensor.errors import StoreCorruptError
from ticktensor.kernels import crc32c
from ticktensor.store import Layout, Store

from .conftest import write_pack_of

LAYOUT = Layout(codec="zstd", chunk_rows=64)


def _packed(root: Path) -> Store:
    store = Store.create(str(root), layout=LAYOUT)
    store.commit(packs=[write_pack_of(store, 0, rows=300)])
    return store


def _forge_entry(root: Path, edit: Any) -> None:
    """Rewrite the latest log entry with ``edit`` and make the pointer vouch for it."""
    pointer = json.loads((root / "latest.json").read_text())
    path = root / pointer["manifest"]
    doc = json.loads(path.read_bytes())
    edit(doc)
    data = json.dumps(doc, sort_keys=True).encode()
    path.write_bytes(data)
    pointer["sha256"] = hashlib.sha256(data).hexdigest()
    (root / "latest.json").write_text(json.dumps(pointer))


def _rewrite_shard(root: Path, name: str, chunks: list[bytes], slots: int) -> None:
    """Store ``chunks`` back to back as the pack's shard ``name``, with a matching index,
    record their CRC-32C in the array's metadata, and record the new files' hashes and
    sizes in the log entry."""
    index = np.full((slots, 2), (1 << 64) - 1, dtype="<u8")
    sizes = np.array([len(c) for c in chunks], dtype=np.uint64)
    index[: len(chunks), 0] = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint64)
    index[: len(chunks), 1] = sizes
    data = b"".join(chunks) + index.tobytes()
    array, _, shard = name.split("/")[:3]

    def edit(doc: dict[str, Any]) -> None:
        pack = doc["packs"][0]
        (root / pack["path"] / name).write_bytes(data)
        pack["files"][name] = [hashlib.sha256(data).hexdigest(), len(data)]
        meta_path = root / pack["path"] / array / "zarr.json"
        meta = json.loads(meta_path.read_bytes())
        crcs = meta["attributes"]["chunk_crc32c"]
        for j, chunk in enumerate(chunks):
            crcs[int(shard) * slots + j] = crc32c(chunk)
        meta_bytes = json.dumps(meta).encode()
        meta_path.write_bytes(meta_bytes)
        pack["files"][f"{array}/zarr.json"] = [
            hashlib.sha256(meta_bytes).hexdigest(),
            len(meta_bytes),
        ]

    _forge_entry(root, edit)


def _chunks_of(store: Store, array: str) -> list[list[bytes]]:
    """The stored inner chunks of ``array``, shard by shard."""
    v = store.version()
    shards: dict[str, list[bytes]] = {}
    for chunk in v.chunk_map(v.packs[0], array).chunks:
        assert chunk.nbytes is not None
        data = v.location.read_range(chunk.rel, chunk.offset, chunk.offset + chunk.nbytes)
        shards.setdefault(chunk.rel, []).append(data)
    return list(shards.values())


def _read(root: Path) -> None:
    v = Store.open(str(root)).version()
    for pack in v.packs:
        v.read_pack(pack)


@pytest.mark.parametrize("shards", ["one", "several"])
def test_a_zstd_bomb_inner_chunk_is_refused_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shards: str
) -> None:
    """A whole-shard read (one shard) and a ranged read (the last, partial shard of
    several: zarr reads its index, then each chunk's range) both check each frame."""
    if shards == "several":
        monkeypatch.setattr("ticktensor.store._packs.SHARD_BYTES", 4 * 64 * 3 * 4)
    root = tmp_path / "s"
    store = _packed(root)
    chunks = _chunks_of(store, "values")
    assert len(chunks) == (1 if shards == "one" else 3)
    last = chunks[-1]
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (64 << 20))  # 64 MiB; a chunk is 768 B
    key = f"values/c/{len(chunks) - 1}/0"
    _rewrite_shard(root, key, [*last[:-1], bomb], slots=10 if shards == "one" else 4)
    index = (len(chunks) - 1) * 4 + len(last) - 1 if shards == "several" else 9
    with pytest.raises(
        StoreCorruptError,
        match=rf"packs/.*/{key} bytes \d+\+{len(bomb)} \(values chunk {index} of pack "
        r"2024-01-02\): cannot decode this zstd chunk: zstd frame decodes to 67,108,864 "
        "bytes, a chunk holds 768",
    ):
        _read(root)


def test_a_shard_index_pointing_past_its_data_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    (chunks,) = _chunks_of(store, "ts")
    name = "ts/c/0"
    _rewrite_shard(root, name, chunks, slots=10)
    path = root / store.version().packs[0].path / name

    def grow(doc: dict[str, Any]) -> None:
        data = bytearray(path.read_bytes())
        data[-8:] = np.uint64(1 << 40).tobytes()  # the last chunk's size
        path.write_bytes(bytes(data))
        doc["packs"][0]["files"][name] = [hashlib.sha256(data).hexdigest(), len(data)]

    _forge_entry(root, grow)
    with pytest.raises(StoreCorruptError, match=r"indexes chunk 9 at bytes \d+\+1099511627776"):
        _read(root)


@pytest.mark.parametrize(
    "path",
    ["../outside", "/etc", "packs/../../x", "packs/a/../../../x", "segments/x", "events/x",
     "packs//x", "file:/etc/x", "packs/./x"],
)  # fmt: skip
def test_pack_paths_must_stay_inside_packs(tmp_path: Path, path: str) -> None:
    root = tmp_path / "s"
    _packed(root)
    _forge_entry(root, lambda doc: doc["packs"][0].__setitem__("path", path))
    with pytest.raises(StoreCorruptError, match="store_relative_path"):
        Store.open(str(root)).version()


@pytest.mark.parametrize("name", ["../../../../etc/passwd", "/etc/passwd", "values/../../x"])
def test_pack_file_names_must_stay_inside_the_pack(tmp_path: Path, name: str) -> None:
    root = tmp_path / "s"
    _packed(root)

    def edit(doc: dict[str, Any]) -> None:
        files = doc["packs"][0]["files"]
        files[name] = files.pop("values/c/0/0")

    _forge_entry(root, edit)
    with pytest.raises(StoreCorruptError, match="store_relative_path"):
        Store.open(str(root)).version()


def test_a_removed_pack_path_that_escapes_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    store.commit(packs=[write_pack_of(store, 0, rows=300, seed=1)], replace=True)

    def edit(doc: dict[str, Any]) -> None:
        doc["removed_packs"][0]["path"] = "../../elsewhere"

    _forge_entry(root, edit)
    with pytest.raises(StoreCorruptError, match=r"removes 2024-01-02 at \.\./\.\./elsewhere"):
        Store.open(str(root)).version()


def test_a_symlinked_pack_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    pack = store.version().packs[0].path
    outside = tmp_path / "outside"
    os.rename(root / pack, outside)  # same bytes: hashes and sizes still match
    os.symlink(outside, root / pack)
    with pytest.raises(StoreCorruptError, match=r"outside the store root|store_relative_path"):
        _read(root)


def test_a_symlinked_shard_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    shard = root / store.version().packs[0].path / "values/c/0/0"
    outside = tmp_path / "secret"
    os.rename(shard, outside)
    os.symlink(outside, shard)
    with pytest.raises(StoreCorruptError, match="symlink"):
        _read(root)


def test_a_pickle_codec_in_pack_metadata_is_never_run(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = _packed(root)
    pack = store.version().packs[0]
    meta_path = root / pack.path / "values/zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["codecs"][0]["configuration"]["codecs"] = [{"name": "numcodecs.pickle"}]
    data = json.dumps(meta).encode()

    def edit(doc: dict[str, Any]) -> None:
        meta_path.write_bytes(data)
        doc["packs"][0]["files"]["values/zarr.json"] = [hashlib.sha256(data).hexdigest(), len(data)]

    _forge_entry(root, edit)
    with pytest.raises(StoreCorruptError, match=r"stored with codec 'zarr'; the record says zstd"):
        _read(root)
