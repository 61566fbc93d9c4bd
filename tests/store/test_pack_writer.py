"""A pack written a block of symbols at a time is the pack of all its rows at once."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import FormatVersionError, SchemaError
from ticktensor.store import Codec, FileEntry, Layout, Location, PackWriter, Store
from ticktensor.store._packs import pack_content_hash, read_pack_index

FEATURES = ("f0", "f1", "f2")


def _session(counts: list[int], seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    return {
        "symbols": [f"S{i:03d}" for i in range(len(counts))],
        "offsets": offsets,
        "ts": np.concatenate([np.sort(rng.integers(0, 10**12, c)) for c in counts]).astype(
            np.int64
        ),
        "values": rng.standard_normal((n, len(FEATURES))).astype(np.float32),
        "labels": rng.standard_normal((n, 1)).astype(np.float32),
    }


def _in_blocks(
    store: Store, data: dict[str, Any], cuts: list[int], layout: Layout, threads: int = 2
) -> Any:
    """The pack of ``data`` appended in blocks of symbols cut at ``cuts``."""
    writer = store.pack_writer(
        session="2024-01-02",
        feature_names=FEATURES,
        label_names=("y",),
        layout=layout,
        threads=threads,
    )
    bounds = sorted({0, len(data["symbols"]), *(min(c, len(data["symbols"])) for c in cuts)})
    offsets = data["offsets"]
    for first, last in itertools.pairwise(bounds):
        lo, hi = int(offsets[first]), int(offsets[last])
        writer.append(
            data["symbols"][first:last],
            offsets[first : last + 1] - lo,
            data["ts"][lo:hi],
            data["values"][lo:hi],
            data["labels"][lo:hi],
        )
    return writer.finish()


def _files(root: Path, rel: str) -> dict[str, bytes]:
    folder = root / rel
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@settings(max_examples=25, deadline=None)
@given(
    counts=st.lists(st.integers(1, 150), min_size=1, max_size=12),
    cuts=st.lists(st.integers(1, 12), max_size=5),
    codec=st.sampled_from([Codec.NONE, Codec.ZSTD]),
    chunks_per_shard=st.sampled_from([1, 3, 1000]),
    threads=st.sampled_from([0, 1, 2]),
)
def test_blocks_write_the_bytes_of_one_write(
    tmp_path_factory: pytest.TempPathFactory,
    counts: list[int],
    cuts: list[int],
    codec: Codec,
    chunks_per_shard: int,
    threads: int,
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("ticktensor.store._packs.SHARD_BYTES", chunks_per_shard * 64 * 3 * 4)
        root = tmp_path_factory.mktemp("packs")
        layout = Layout(codec=codec, chunk_rows=64)
        data = _session(counts)
        whole = Store.create(str(root / "whole")).write_pack(
            session="2024-01-02",
            feature_names=FEATURES,
            label_names=("y",),
            layout=layout,
            **data,
        )
        parts = _in_blocks(Store.create(str(root / "parts")), data, cuts, layout, threads)
    assert parts == whole
    assert _files(root / "parts", parts.path) == _files(root / "whole", whole.path)


def test_the_content_hash_is_the_decoded_arrays(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"), layout=Layout(chunk_rows=64))
    data = _session([100, 1, 70, 33])
    record = _in_blocks(store, data, [1, 3], Layout(chunk_rows=64))
    version = store.commit(packs=[record])
    read = version.read_pack(record, verify=True)  # recomputes the content hash
    np.testing.assert_array_equal(read.values, data["values"])
    again = pack_content_hash(
        "2024-01-02",
        data["symbols"],
        data["offsets"],
        data["ts"],
        data["values"],
        data["labels"],
        FEATURES,
        ("y",),
        Layout(chunk_rows=64),
    )
    assert again == record.content_hash
    other = data["values"].copy()
    other[150, 1] += 1
    changed = pack_content_hash(
        "2024-01-02",
        data["symbols"],
        data["offsets"],
        data["ts"],
        other,
        data["labels"],
        FEATURES,
        ("y",),
        Layout(chunk_rows=64),
    )
    assert changed != record.content_hash


def test_a_block_must_follow_the_previous_blocks_symbols(tmp_path: Path) -> None:
    writer = Store.create(str(tmp_path / "s")).pack_writer(
        session="2024-01-02", feature_names=FEATURES
    )
    data = _session([5, 5])
    writer.append(["B"], [0, 5], data["ts"][:5], data["values"][:5])
    with pytest.raises(SchemaError, match="must follow the previous block's"):
        writer.append(["A"], [0, 5], data["ts"][5:], data["values"][5:])


def test_a_writer_without_rows_writes_nothing(tmp_path: Path) -> None:
    writer = Store.create(str(tmp_path / "s")).pack_writer(
        session="2024-01-02", feature_names=FEATURES
    )
    with pytest.raises(SchemaError, match="at least one row"):
        writer.finish()
    assert not (tmp_path / "s" / "packs").exists() or not any((tmp_path / "s" / "packs").iterdir())


def test_a_pack_of_an_unknown_format_is_refused(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    data = _session([10, 20])
    record = store.write_pack(
        session="2024-01-02", feature_names=FEATURES, label_names=("y",), **data
    )
    group = tmp_path / "s" / record.path / "zarr.json"
    doc = json.loads(group.read_bytes())
    doc["attributes"]["ticktensor"]["format_version"] = 99
    raw = json.dumps(doc).encode()
    group.write_bytes(raw)
    files = {**record.files, "zarr.json": FileEntry(hashlib.sha256(raw).hexdigest(), len(raw))}
    with pytest.raises(FormatVersionError, match="format_version 99"):
        read_pack_index(Location(str(tmp_path / "s")), replace(record, files=files))


def _writing(root: Path) -> list[Path]:
    return sorted((root / "packs").glob("*.writing-*")) if (root / "packs").exists() else []


def _appended(
    root: Path, counts: list[int], chunk_rows: int
) -> tuple[Store, PackWriter, dict[str, Any]]:
    """A local store and a writer given one block of ``counts`` rows per symbol."""
    store = Store.create(str(root))
    writer = store.pack_writer(
        session="2024-01-02", feature_names=FEATURES, layout=Layout(chunk_rows=chunk_rows)
    )
    data = _session(counts)
    writer.append(data["symbols"], data["offsets"], data["ts"], data["values"])
    return store, writer, data


def test_a_local_writer_stores_chunks_as_they_come_and_moves_them_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ticktensor.store._pack_writer.SPILL_BYTES", 0)  # a large pack
    store, writer, data = _appended(tmp_path / "s", [30_000, 20_000], 4096)
    (working,) = _writing(tmp_path / "s")
    assert sum(p.stat().st_size for p in working.rglob("*") if p.is_file()) > 0
    record = writer.finish()
    assert _writing(tmp_path / "s") == []
    version = store.commit(packs=[record])
    np.testing.assert_array_equal(version.read_pack(record, verify=True).values, data["values"])


def test_a_writer_closed_unfinished_leaves_nothing(tmp_path: Path) -> None:
    _, writer, data = _appended(tmp_path / "s", [300], 64)
    writer.close()
    assert _writing(tmp_path / "s") == []
    with pytest.raises(SchemaError, match="finished or closed"):
        writer.finish()
    with pytest.raises(SchemaError, match="finished or closed"):
        writer.append(data["symbols"], data["offsets"], data["ts"], data["values"])


def test_repair_removes_what_a_killed_writer_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ticktensor.store._pack_writer.SPILL_BYTES", 0)  # a large pack
    store, writer, _ = _appended(tmp_path / "s", [3_000], 64)
    assert _writing(tmp_path / "s")  # the writer dies here: nothing closes it
    report = store.repair(grace_s=0)
    assert any(".writing-" in rel for rel, _ in report.removed)
    assert _writing(tmp_path / "s") == []
    writer.close()  # the test's process lives on: its open files
