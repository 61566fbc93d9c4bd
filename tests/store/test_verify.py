"""verify: every stored byte is checked against the manifest's hashes."""

from __future__ import annotations

import os

import pytest

from ticktensor.errors import StoreCorruptError
from ticktensor.store import Layout, Store

from .conftest import make_series, write_series


def _store(path: str) -> Store:
    store = Store.create(path, layout=Layout(codec="zstd", chunk_rows=100))
    segs = []
    for sym in ("A", "B"):
        s = make_series(sym, 0, rows=450)
        segs.append(write_series(store, s))
    store.commit(segments=segs)
    return store


def test_intact_store_verifies(tmp_path: os.PathLike[str]) -> None:
    store = _store(str(tmp_path))
    seen: list[str] = []
    report = store.verify(on_file=lambda rel, n: seen.append(rel))
    assert report.ok
    assert report.files_checked == len(seen) == sum(len(s.files) for s in store.version().segments)
    assert report.bytes_checked == store.version().nbytes


def test_flipped_byte_names_the_chunk(tmp_path: os.PathLike[str]) -> None:
    store = _store(str(tmp_path))
    seg = store.version().segment("B", "2024-01-02")
    chunk = os.path.join(str(tmp_path), seg.path, "values/c/2/0")
    with open(chunk, "r+b") as f:
        f.seek(7)
        byte = f.read(1)
        f.seek(7)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(StoreCorruptError) as info:
        store.verify()
    msg = str(info.value)
    assert "segment B/2024-01-02 chunk values/c/2/0" in msg
    assert "content hash mismatch" in msg
    assert info.value.problems == [(f"{seg.path}/values/c/2/0", info.value.problems[0][1])]


def test_missing_chunk_and_older_version(tmp_path: os.PathLike[str]) -> None:
    store = _store(str(tmp_path))
    s = make_series("C", 1, rows=50)
    store.commit(segments=[write_series(store, s)])
    seg = store.version(1).segment("A", "2024-01-02")
    os.unlink(os.path.join(str(tmp_path), seg.path, "ts/c/0"))
    for version in (1, 2):
        with pytest.raises(
            StoreCorruptError, match="segment A/2024-01-02 chunk ts/c/0: file is missing"
        ):
            store.verify(version)


def test_tampered_manifest_detected(tmp_path: os.PathLike[str]) -> None:
    store = _store(str(tmp_path))
    path = os.path.join(str(tmp_path), "versions/00000001.json")
    with open(path, "ab") as f:
        f.write(b" ")
    with pytest.raises(StoreCorruptError, match=r"versions/00000001\.json: manifest sha256"):
        store.verify()
