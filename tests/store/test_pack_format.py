"""Packs: one sharded Zarr group per session, read back by zarr-python and by the chunk map."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from ticktensor.errors import SchemaError, StoreCorruptError, VersionConflictError
from ticktensor.store import Codec, Layout, Store
from ticktensor.store.testing import write_segment

FEATURES = [f"f{i}" for i in range(5)]


def _session(symbols: int, rows: int, seed: int = 0) -> dict[str, Any]:
    """A session of ``symbols`` symbols with 1..rows rows each (uneven, so ranges cross chunks)."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, rows + 1, size=symbols)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    ts = np.concatenate([np.sort(rng.integers(0, 10**12, size=c)) for c in counts]).astype(np.int64)
    return {
        "symbols": [f"S{i:03d}" for i in range(symbols)],
        "offsets": offsets,
        "ts": ts,
        "values": rng.standard_normal((n, len(FEATURES))).astype(np.float32),
        "labels": rng.standard_normal((n, 1)).astype(np.float32),
        "feature_names": FEATURES,
        "label_names": ["y"],
    }


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD, Codec.LZ4, Codec.BLOSC])
def test_zarr_python_reads_every_array_of_a_pack(tmp_path: Path, codec: Codec) -> None:
    store = Store.create(str(tmp_path / "s"), layout=Layout(codec=codec, chunk_rows=64))
    data = _session(30, 50)
    record = store.write_pack(session="2024-01-02", **data)
    version = store.commit(packs=[record])
    group = zarr.open_group(str(tmp_path / "s" / record.path), mode="r")
    np.testing.assert_array_equal(group["ts"][:], data["ts"])
    np.testing.assert_array_equal(group["values"][:], data["values"])
    np.testing.assert_array_equal(group["labels"][:], data["labels"])
    attrs = group.attrs["ticktensor"]
    assert attrs["symbols"] == data["symbols"]
    assert attrs["offsets"] == data["offsets"].tolist()
    read = version.read_pack(version.pack("2024-01-02"))
    np.testing.assert_array_equal(read.values, data["values"])
    assert version.symbols == tuple(data["symbols"])
    assert version.rows == record.rows
    assert store.verify().ok


def test_chunk_map_byte_ranges_decode_to_the_rows_they_claim(tmp_path: Path) -> None:
    """Each StoredChunk's byte range, decoded by hand, holds exactly its rows."""
    import numcodecs

    store = Store.create(str(tmp_path / "s"), layout=Layout(codec=Codec.ZSTD, chunk_rows=40))
    data = _session(12, 30, seed=1)
    record = store.write_pack(session="d1", **data)
    version = store.commit(packs=[record])
    values = data["values"]
    chunk_map = version.chunk_map(version.pack("d1"), "values")
    assert [c.index for c in chunk_map.chunks] == list(range(-(-record.rows // 40)))
    for chunk in chunk_map.chunks:
        assert chunk.nbytes is not None
        shard = (tmp_path / "s" / chunk.rel).read_bytes()
        stored = shard[chunk.offset : chunk.offset + chunk.nbytes]
        raw = numcodecs.Zstd().decode(stored)
        rows = np.frombuffer(raw, dtype="<f4").reshape(chunk.stored_rows, chunk.columns)
        lo = chunk.row_start
        np.testing.assert_array_equal(rows[: chunk.rows], values[lo : lo + chunk.rows])
        import hashlib

        assert hashlib.sha256(stored).hexdigest() == chunk.sha256
    # covering(): rows of one symbol map to the chunks that hold them
    index = version.pack_index(version.pack("d1"))
    lo, hi = index.rows_of("S005")
    covering = chunk_map.covering(lo, hi)
    assert covering[0].row_start <= lo
    assert covering[-1].row_start + covering[-1].rows >= hi


def test_large_pack_is_split_into_shards_of_bounded_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ticktensor.store._packs as packs

    monkeypatch.setattr(packs, "SHARD_BYTES", 64 * 5 * 4 * 3)  # three 64-row chunks per shard
    store = Store.create(str(tmp_path / "s"), layout=Layout(chunk_rows=64))
    data = _session(40, 40, seed=2)
    record = store.write_pack(session="d", **data)
    version = store.commit(packs=[record])
    shards = sorted(k for k in record.files if k.startswith("values/c/"))
    assert len(shards) == -(-record.rows // (64 * 3)) > 1
    group = zarr.open_group(str(tmp_path / "s" / record.path), mode="r")
    np.testing.assert_array_equal(group["values"][:], data["values"])
    chunks = version.chunk_map(version.pack("d"), "values").chunks
    assert {c.rel.rsplit("/values/", 1)[1] for c in chunks} == {s[len("values/") :] for s in shards}


def test_a_log_entry_adding_a_pack_is_small_at_any_number_of_symbols(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    sizes = []
    for n_symbols in (10, 1000):
        data = _session(n_symbols, 3, seed=n_symbols)
        record = store.write_pack(session=f"d{n_symbols}", **data)
        version = store.commit(packs=[record])
        sizes.append((tmp_path / "s" / f"versions/{version.version:08d}.json").stat().st_size)
    assert sizes[1] < sizes[0] * 1.2, sizes  # the symbols live in the pack, not the log
    assert len(record.files) == 9  # the group; 3 arrays and chunk_sha256: 2 files each


def test_rerun_of_an_identical_pack_writes_nothing_and_commits_nothing(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    data = _session(5, 10)
    first = store.commit(packs=[store.write_pack(session="d", **data)])
    again = store.write_pack(session="d", **data)
    assert again == first.pack("d")
    assert store.commit(packs=[again]).version == first.version


def test_a_correction_rewrites_the_session_copy_on_write(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    data = _session(5, 10)
    v1 = store.commit(packs=[store.write_pack(session="d", **data)])
    values = np.array(data["values"], copy=True)
    values[0, 0] += 1
    fixed = store.write_pack(session="d", **{**data, "values": values})
    with pytest.raises(VersionConflictError, match="replace=True"):
        store.commit(packs=[fixed])
    v2 = store.commit(packs=[fixed], replace=True)
    assert v2.pack("d").path != v1.pack("d").path
    old = store.version(v1.version)
    np.testing.assert_array_equal(old.read_pack(old.pack("d")).values, data["values"])
    np.testing.assert_array_equal(v2.read_pack(v2.pack("d")).values, values)


def test_a_session_is_held_by_segments_or_one_pack(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    data = _session(2, 4)
    ts, values = data["ts"], data["values"]
    seg = write_segment(
        store,
        symbol="S000",
        session="d",
        ts=ts[:2].copy(),
        values=values[:2].copy(),
        feature_names=FEATURES,
    )
    store.commit(segments=[seg])
    pack = store.write_pack(session="d", **{**data, "labels": None, "label_names": []})
    with pytest.raises(VersionConflictError, match="segment"):
        store.commit(packs=[pack])
    version = store.commit(packs=[pack], replace=True)
    assert version.segments == ()
    assert len(version.packs) == 1
    late = write_segment(
        store,
        symbol="S001",
        session="d",
        ts=ts[:1].copy(),
        values=values[:1].copy(),
        feature_names=FEATURES,
    )
    with pytest.raises(VersionConflictError, match="stored as a pack"):
        store.commit(segments=[late])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"symbols": ["B", "A"]}, "sorted"),
        ({"offsets": np.array([0, 1], dtype=np.int64)}, "offsets"),
        ({"values": np.zeros((3, 5), dtype=np.float64)}, "float32"),
        ({"ts": np.array([5, 4, 9], dtype=np.int64)}, "non-decreasing"),
    ],
)
def test_malformed_pack_inputs_are_schema_errors(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    store = Store.create(str(tmp_path / "s"))
    base = {
        "symbols": ["A", "B"],
        "offsets": np.array([0, 2, 3], dtype=np.int64),
        "ts": np.array([1, 2, 0], dtype=np.int64),  # B starts earlier than A ends: allowed
        "values": np.zeros((3, 5), dtype=np.float32),
        "feature_names": FEATURES,
    }
    store.write_pack(session="ok", **base)
    with pytest.raises(SchemaError, match=message):
        store.write_pack(session="bad", **{**base, **change})


def test_a_tampered_offsets_index_is_refused(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    record = store.write_pack(session="d", **_session(4, 5))
    store.commit(packs=[record])
    group = tmp_path / "s" / record.path / "zarr.json"
    doc = json.loads(group.read_text())
    doc["attributes"]["ticktensor"]["offsets"][1] += 1
    group.write_text(json.dumps(doc))
    fresh = Store.open(str(tmp_path / "s")).version()
    with pytest.raises(StoreCorruptError, match="hash mismatch"):
        fresh.pack_index(fresh.pack("d"))


def test_a_commit_can_drop_tables_an_all_symbol_table_takes_over(tmp_path: Path) -> None:
    import pyarrow as pa

    from ticktensor.store import ALL_SYMBOLS

    store = Store.create(str(tmp_path / "s"))
    table = pa.table({"ts_event": pa.array([1, 2], pa.int64()), "symbol": ["A", "A"]})
    per_symbol = store.write_table(kind="trades", symbol="A", session="d", table=table)
    store.commit(tables=[per_symbol])
    merged = store.write_table(kind="trades", symbol=ALL_SYMBOLS, session="d", table=table)
    with pytest.raises(VersionConflictError, match="no such table"):
        store.commit(tables=[merged], remove_tables=[("trades", "B", "d")])
    version = store.commit(tables=[merged], remove_tables=[("trades", "A", "d")])
    assert [t.key for t in version.tables] == [("trades", ALL_SYMBOLS, "d")]
    assert [t.key for t in store.version(1).tables] == [("trades", "A", "d")]  # time travel


def test_writing_an_older_versions_pack_again_never_removes_its_files(tmp_path: Path) -> None:
    """A revert writes the content of an older version's pack again: the same path. The
    folder is kept (version 1 stays readable throughout); a file there with other bytes
    is refused, never overwritten."""
    from ticktensor.errors import StoreError

    store = Store.create(str(tmp_path / "s"))
    first, second = _session(5, 10, seed=1), _session(5, 10, seed=2)
    v1 = store.commit(packs=[store.write_pack(session="d", **first)])
    store.commit(packs=[store.write_pack(session="d", **second)], replace=True)
    folder = tmp_path / "s" / v1.pack("d").path
    inode = (folder / "values" / "c" / "0" / "0").stat().st_ino
    again = store.write_pack(session="d", **first)
    assert again == v1.pack("d")
    assert (folder / "values" / "c" / "0" / "0").stat().st_ino == inode  # kept, not rewritten
    assert store.verify(v1.version).ok
    (folder / "ts" / "c" / "0").write_bytes(b"other bytes")
    with pytest.raises(StoreError, match="exists with other bytes"):
        store.write_pack(session="d", **first)
    assert (folder / "ts" / "c" / "0").read_bytes() == b"other bytes"  # left for verify


def test_a_pack_folder_linked_from_outside_is_refused_by_every_reader(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    record = store.write_pack(session="d", **_session(3, 5))
    store.commit(packs=[record])
    folder = tmp_path / "s" / record.path
    folder.rename(tmp_path / "outside")
    folder.symlink_to(tmp_path / "outside", target_is_directory=True)
    version = Store.open(str(tmp_path / "s")).version()
    with pytest.raises(StoreCorruptError, match="outside the store root"):
        version.pack_index(version.pack("d"))
    with pytest.raises(StoreCorruptError, match="outside the store root"):
        version.chunk_map(version.pack("d"), "values")


def test_a_pack_must_hold_every_symbol_of_the_segments_it_replaces(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    data = _session(2, 4)
    for i, symbol in enumerate(data["symbols"]):
        lo, hi = data["offsets"][i], data["offsets"][i + 1]
        seg = write_segment(
            store,
            symbol=symbol,
            session="d",
            ts=data["ts"][lo:hi].copy(),
            values=data["values"][lo:hi].copy(),
            feature_names=FEATURES,
            labels=data["labels"][lo:hi].copy(),
            label_names=["y"],
        )
        store.commit(segments=[seg])
    n = int(data["offsets"][1])
    only_first = store.write_pack(
        session="d",
        **{
            **data,
            "symbols": data["symbols"][:1],
            "offsets": data["offsets"][:2],
            "ts": data["ts"][:n],
            "values": data["values"][:n],
            "labels": data["labels"][:n],
        },
    )
    with pytest.raises(VersionConflictError, match="S001"):
        store.commit(packs=[only_first], replace=True)
    assert len(store.version().segments) == 2


def test_a_commit_names_the_pack_whose_file_went_missing(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    record = store.write_pack(session="d", **_session(3, 5))
    (tmp_path / "s" / record.path / "values" / "c" / "0" / "0").unlink()
    with pytest.raises(StoreCorruptError, match="write the pack again"):
        store.commit(packs=[record])


def test_a_session_table_lets_readers_skip_row_groups_of_other_symbols(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    from ticktensor.store import ALL_SYMBOLS, table_dataset

    store = Store.create(str(tmp_path / "s"))
    per_symbol = 20_000
    symbols = [f"S{i:03d}" for i in range(20)]
    table = pa.table(
        {
            "ts_event": pa.array(np.tile(np.arange(per_symbol), len(symbols)), pa.int64()),
            "symbol": np.repeat(symbols, per_symbol),
        }
    )
    record = store.write_table(kind="trades", symbol=ALL_SYMBOLS, session="d", table=table)
    version = store.commit(tables=[record])
    meta = pq.ParquetFile(tmp_path / "s" / record.path).metadata
    column = meta.schema.names.index("symbol")
    groups = [meta.row_group(i).column(column).statistics for i in range(meta.num_row_groups)]
    holding = [g for g in groups if g.min <= "S007" <= g.max]
    assert meta.num_row_groups == -(-len(symbols) * per_symbol // (1 << 16))
    assert len(holding) <= 2  # of 7: a reader of one symbol skips the rest
    rows = table_dataset(version, "trades").to_table(filter=pads.field("symbol") == "S007")
    assert rows.num_rows == per_symbol
