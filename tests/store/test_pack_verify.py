"""verify and repair over packs: a damaged inner chunk of a shard is named with its bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ticktensor.cli import main
from ticktensor.errors import StoreCorruptError
from ticktensor.store import Layout, PackRecord, Store, StoredChunk, migrate

from .conftest import make_series, write_pack_of, write_series

LAYOUT = Layout(codec="zstd", chunk_rows=64)


def _packed(root: Path, monkeypatch: pytest.MonkeyPatch, chunks_per_shard: int = 0) -> Store:
    """A store whose version 1 is one pack of 2 x 300 rows (10 inner chunks per array),
    in one shard per array, or in shards of ``chunks_per_shard`` chunks."""
    if chunks_per_shard:
        # Values shards hold chunks_per_shard chunks of 64 rows x 3 float32 features.
        monkeypatch.setattr("ticktensor.store._packs.SHARD_BYTES", chunks_per_shard * 64 * 3 * 4)
    store = Store.create(str(root), layout=LAYOUT)
    store.commit(packs=[write_pack_of(store, 0, rows=300)])
    return store


def _flip(root: Path, chunk: StoredChunk, at: int | None = None) -> None:
    """Flip one byte of ``chunk``'s range in its shard (the middle unless ``at``)."""
    assert chunk.nbytes is not None
    path = root / chunk.rel
    data = bytearray(path.read_bytes())
    data[chunk.offset + (chunk.nbytes // 2 if at is None else at)] ^= 0x01
    path.write_bytes(bytes(data))


def _chunk(store: Store, array: str, index: int) -> tuple[PackRecord, StoredChunk]:
    v = store.version()
    (pack,) = v.packs
    return pack, v.chunk_map(pack, array).chunks[index]


@pytest.mark.parametrize("chunks_per_shard", [0, 4])
def test_a_flipped_byte_names_the_inner_chunk_and_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunks_per_shard: int
) -> None:
    store = _packed(tmp_path / "s", monkeypatch, chunks_per_shard)
    pack, chunk = _chunk(store, "values", 7)
    shard = "values/c/1/0" if chunks_per_shard else "values/c/0/0"
    assert chunk.rel == f"{pack.path}/{shard}"
    _flip(tmp_path / "s", chunk)
    with pytest.raises(StoreCorruptError) as info:
        store.verify()
    named = (
        f"pack 2024-01-02 values chunk 7 (bytes {chunk.offset}+{chunk.nbytes} of "
        f"{pack.path}/{shard}): content hash mismatch"
    )
    assert named in str(info.value)
    assert len(info.value.problems) == 1
    assert info.value.problems[0][0] == chunk.rel
    # A reader that checks chunk hashes names the same chunk.
    with pytest.raises(StoreCorruptError, match=r"\(values chunk 7 of pack 2024-01-02\)"):
        store.version().read_pack(pack, verify=True)


def test_every_damaged_chunk_of_a_shard_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _packed(tmp_path / "s", monkeypatch)
    for k in (2, 9):
        _flip(tmp_path / "s", _chunk(store, "ts", k)[1])
    with pytest.raises(StoreCorruptError) as info:
        store.verify()
    message = str(info.value)
    assert "2 problem(s)" in message
    assert "pack 2024-01-02 ts chunk 2 (bytes" in message
    assert "pack 2024-01-02 ts chunk 9 (bytes" in message


def test_a_damaged_shard_index_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _packed(tmp_path / "s", monkeypatch)
    pack, _ = _chunk(store, "labels", 0)
    path = tmp_path / "s" / pack.path / "labels/c/0/0"
    data = bytearray(path.read_bytes())
    data[-16 * 10 + 16] ^= 0x04  # the offset of chunk 1 in the index at the end
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError) as info:
        store.verify()
    index_at = len(data) - 160
    assert (
        f"pack 2024-01-02 labels shard index (bytes {index_at}+160 of {pack.path}/labels/c/0/0): "
        "damaged, its entries do not tile the chunks"
    ) in str(info.value)


def test_a_truncated_shard_is_named_as_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _packed(tmp_path / "s", monkeypatch)
    pack, _ = _chunk(store, "values", 0)
    path = tmp_path / "s" / pack.path / "values/c/0/0"
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(StoreCorruptError, match=r"pack 2024-01-02 file values/c/0/0: content hash"):
        store.verify()
    os.unlink(path)
    missing = r"pack 2024-01-02 file values/c/0/0: file is missing"
    with pytest.raises(StoreCorruptError, match=missing):
        store.verify()


def test_repair_removes_unpublished_packs_and_keeps_every_published_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "s"
    store = Store.create(str(root), layout=LAYOUT)
    store.commit(segments=[write_series(store, make_series(s, 0, rows=100)) for s in "AB"])
    migrate(store)  # version 2: the pack; version 1 keeps the segments
    lost = write_pack_of(store, 1)  # written, never committed: debris of a killed job
    before = {p for p in root.rglob("*") if p.is_file()}
    dry = store.repair(grace_s=0, dry_run=True)
    assert sorted(rel for rel, _ in dry.removed) == sorted(f"{lost.path}/{k}" for k in lost.files)
    assert main(["verify", str(root), "--quiet", "--repair", "--grace", "0"]) == 0
    out = capsys.readouterr().out
    assert f"removed {len(lost.files)} orphaned file(s)" in out
    after = {p for p in root.rglob("*") if p.is_file()}
    assert before - after == {root / lost.path / k for k in lost.files}
    assert not (root / lost.path).exists()
    for version in (1, 2):
        store.verify(version)
    assert store.version(1).segments
    assert store.version(2).packs
