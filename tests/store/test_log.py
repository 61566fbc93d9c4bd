"""Store format 2: a small log entry per version, a checkpoint every K, hashes all the way."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.cli import main
from ticktensor.errors import ConfigError, StoreCorruptError, VersionConflictError
from ticktensor.store import Layout, Store

from .conftest import make_series, write_series


def _grow(url: str, versions: int, *, every: int, per_version: int = 1) -> Store:
    """A store whose version ``v`` adds ``per_version`` segments of session ``v``."""
    store = Store.create(url, layout=Layout(chunk_rows=64), checkpoint_every=every)
    for v in range(1, versions + 1):
        segs = [
            write_series(store, make_series(f"S{k:03d}", v, rows=40)) for k in range(per_version)
        ]
        store.commit(segments=segs, message=f"day {v}")
    return store


def _doc(root: Path, rel: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / rel).read_bytes())
    return doc


def _publish(root: Path, version: int, doc: dict[str, Any]) -> None:
    """Rewrite version ``version``'s entry as ``doc`` and make the pointer vouch for it."""
    data = json.dumps(doc, sort_keys=True).encode()
    (root / f"versions/{version:08d}.json").write_bytes(data)
    pointer = _doc(root, "latest.json")
    pointer["sha256"] = hashlib.sha256(data).hexdigest()
    (root / "latest.json").write_text(json.dumps(pointer))


def _summary(store: Store, version: int) -> tuple[Any, ...]:
    m = store.version(version).manifest
    return m.version, m.message, m.segments, m.tables, m.parent_sha256


def test_every_kth_version_writes_a_checkpoint(tmp_path: Path) -> None:
    store = _grow(str(tmp_path / "s"), 7, every=3)
    names = sorted(os.listdir(tmp_path / "s" / "versions"))
    entries = [f"{v:08d}.json" for v in range(8)]
    assert names == sorted([*entries, "00000003.checkpoint.json", "00000006.checkpoint.json"])
    for v in range(1, 8):
        entry = _doc(tmp_path / "s", f"versions/{v:08d}.json")
        assert entry["format"] == "ticktensor.log"
        assert [s["session"] for s in entry["segments"]] == [f"2024-01-{2 + v:02d}"]
        assert (entry["checkpoint"] is not None) == (v % 3 == 0)
    checkpoint = _doc(tmp_path / "s", "versions/00000006.checkpoint.json")
    assert checkpoint["format"] == "ticktensor.checkpoint"
    assert len(checkpoint["segments"]) == 6
    assert store.checkpoint_every == Store.open(store.url).checkpoint_every == 3
    assert [len(m.segments) for m in store.versions()] == list(range(8))
    assert [m.message for m in store.versions()][1:] == [f"day {v}" for v in range(1, 8)]


def test_any_version_opens_from_two_checkpoints_and_at_most_2k_entries(tmp_path: Path) -> None:
    every, latest = 3, 8
    store = _grow(str(tmp_path / "s"), latest, every=every)
    for version in range(latest + 1):
        # A copy that holds only what opening `version` may read: latest.json, the
        # checkpoint at or below it and the entries from there up, and what checking
        # that checkpoint against the log reads: the checkpoint before it and the
        # entries from there.
        copy = tmp_path / f"only-{version}"
        shutil.copytree(tmp_path / "s", copy)
        base = version - version % every
        before = max(base - every, 0) if base > 0 else base
        needed = {f"{v:08d}.json" for v in range(before, version + 1)}
        needed.update(f"{v:08d}.checkpoint.json" for v in (before, base) if v > 0)
        assert len(needed) <= 2 * every + 2
        for name in os.listdir(copy / "versions"):
            if name not in needed:
                os.unlink(copy / "versions" / name)
        assert _summary(Store.open(str(copy)), version) == _summary(store, version)
    with pytest.raises(StoreCorruptError, match=r"versions/00000002\.json: version file"):
        Store.open(str(tmp_path / "only-8")).version(2)


def test_commit_metadata_does_not_grow_with_the_store(tmp_path: Path) -> None:
    _grow(str(tmp_path / "s"), 12, every=10, per_version=20)
    sizes = [(tmp_path / "s" / f"versions/{v:08d}.json").stat().st_size for v in range(1, 13)]
    assert max(sizes) / min(sizes) < 1.05, sizes  # 20 records each, 20 or 240 stored
    checkpoint = (tmp_path / "s" / "versions/00000010.checkpoint.json").stat().st_size
    assert checkpoint > 8 * sizes[0]  # the full state: 200 records


def test_replace_is_a_removal_and_an_addition(tmp_path: Path) -> None:
    store = _grow(str(tmp_path / "s"), 2, every=10)
    old = store.version().segment("S000", "2024-01-03")
    again = make_series("S000", 1, rows=40, seed=9)
    new = write_series(store, again)
    with pytest.raises(VersionConflictError, match="pass replace=True"):
        store.commit(segments=[new])
    v3 = store.commit(segments=[new], replace=True)
    entry = _doc(tmp_path / "s", "versions/00000003.json")
    assert entry["removed_segments"] == [
        {"symbol": "S000", "session": "2024-01-03", "path": old.path}
    ]
    assert [s["path"] for s in entry["segments"]] == [new.path]
    assert v3.segment("S000", "2024-01-03") == new
    assert store.version(2).segment("S000", "2024-01-03") == old
    np.testing.assert_array_equal(v3.read_segment(new).values, again.values)
    store.verify(2)
    store.verify(3)


@pytest.mark.parametrize("forgery", ["drop-removal", "remove-missing", "skip-version"])
def test_an_entry_that_does_not_fit_its_parent_is_corrupt(tmp_path: Path, forgery: str) -> None:
    store = _grow(str(tmp_path / "s"), 2, every=10)
    new = write_series(store, make_series("S000", 1, rows=40, seed=9))
    store.commit(segments=[new], replace=True)
    root = tmp_path / "s"
    doc = _doc(root, "versions/00000003.json")
    if forgery == "drop-removal":
        doc["removed_segments"] = []
        match = "without removing it"
    elif forgery == "remove-missing":
        doc["removed_segments"][0]["session"] = "2031-01-01"
        match = "which the parent version does not have"
    else:
        doc["parent"], doc["version"] = 1, 2
        match = "holds version 2, expected version 3"
    _publish(root, 3, doc)
    with pytest.raises(StoreCorruptError, match=match):
        Store.open(str(root)).version()


def test_a_damaged_checkpoint_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = _grow(str(tmp_path / "s"), 4, every=3)
    path = tmp_path / "s" / "versions/00000003.checkpoint.json"
    path.write_bytes(path.read_bytes().replace(b'"rows":40', b'"rows":41', 1))
    fresh = Store.open(str(tmp_path / "s"))  # a new URL-keyed read: nothing cached
    where = r"versions/00000003\.checkpoint\.json: sha256 \w+ != \w+ recorded by .*00000003\.json"
    with pytest.raises(StoreCorruptError, match=where):
        fresh.verify()
    with pytest.raises(StoreCorruptError, match=where):
        store.verify(3)
    assert main(["verify", store.url, "--quiet"]) != 0
    assert "00000003.checkpoint.json" in capsys.readouterr().err
    store.verify(2)  # below the checkpoint: entries 0..2 only


def test_a_damaged_entry_below_the_latest_is_named(tmp_path: Path) -> None:
    _grow(str(tmp_path / "s"), 4, every=10)
    path = tmp_path / "s" / "versions/00000002.json"
    path.write_bytes(path.read_bytes() + b" ")
    copy = tmp_path / "copy"  # another URL: its states are not cached yet
    shutil.copytree(tmp_path / "s", copy)
    with pytest.raises(
        StoreCorruptError, match=r"versions/00000002\.json: sha256 .* recorded by .*00000003\.json"
    ):
        Store.open(str(copy)).version()


def test_checkpoint_paths_must_stay_inside_the_store(tmp_path: Path) -> None:
    _grow(str(tmp_path / "s"), 3, every=3)
    root = tmp_path / "s"
    checkpoint = _doc(root, "versions/00000003.checkpoint.json")
    checkpoint["segments"][0]["path"] = "../../outside"
    data = json.dumps(checkpoint).encode()
    (root / "versions/00000003.checkpoint.json").write_bytes(data)
    entry = _doc(root, "versions/00000003.json")
    entry["checkpoint"]["file"] = [hashlib.sha256(data).hexdigest(), len(data)]
    _publish(root, 3, entry)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    with pytest.raises(StoreCorruptError, match="store_relative_path"):
        Store.open(str(copy)).version()
    entry["checkpoint"]["path"] = "segments/../../x"
    _publish(copy, 3, entry)
    with pytest.raises(StoreCorruptError, match="store_relative_path"):
        Store.open(str(copy)).version()
    entry["checkpoint"]["path"] = "versions/00000000.json"
    _publish(copy, 3, entry)
    named = r"version 3's is 'versions/00000003\.checkpoint\.json'"
    with pytest.raises(StoreCorruptError, match=named):
        Store.open(str(copy)).version()


def test_write_segment_reads_no_version_file_once_the_latest_is_known(tmp_path: Path) -> None:
    store = _grow(str(tmp_path / "s"), 7, every=10)
    published = store.version().segment("S000", "2024-01-04")
    for version in range(7):  # time travel: more old states than the process keeps
        store.version(version)
    hidden = tmp_path / "versions-away"
    os.rename(tmp_path / "s" / "versions", hidden)
    try:
        again = write_series(store, make_series("S000", 2, rows=40))
        assert again == published  # idempotent: the published record, nothing rewritten
        fresh = write_series(store, make_series("S001", 2, rows=40))
    finally:
        os.rename(hidden, tmp_path / "s" / "versions")
    assert store.commit(segments=[fresh]).version == 8


def test_a_handle_sees_commits_of_another(tmp_path: Path) -> None:
    first = _grow(str(tmp_path / "s"), 1, every=10)
    first.version()  # the latest state is now known to this handle
    other = Store.open(first.url)
    s = make_series("NEW", 5, rows=40)
    record = write_series(other, s)
    other.commit(segments=[record])
    assert write_series(first, s) == record
    assert first.commit(segments=[record]).version == 2  # nothing new: no version 3
    assert first.latest_version() == 2


def test_repair_keeps_checkpoints(tmp_path: Path) -> None:
    store = _grow(str(tmp_path / "s"), 4, every=2)
    torn = tmp_path / "s" / "versions/00000006.checkpoint.json"  # of an unpublished version
    torn.write_text("{")
    report = store.repair(grace_s=0)
    assert [rel for rel, _ in report.removed] == ["versions/00000006.checkpoint.json"]
    names = sorted(os.listdir(tmp_path / "s" / "versions"))
    assert [n for n in names if "checkpoint" in n] == [
        "00000002.checkpoint.json",
        "00000004.checkpoint.json",
    ]
    Store.open(str(tmp_path / "s")).verify()


def test_checkpoint_every_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="checkpoint_every must be a positive integer, got 0"):
        Store.create(str(tmp_path / "s"), checkpoint_every=0)
    store = Store.create(str(tmp_path / "t"))
    header = tmp_path / "t" / "ticktensor.json"
    header.write_text(
        header.read_text().replace('"checkpoint_every": 10', '"checkpoint_every": -1')
    )
    with pytest.raises(StoreCorruptError, match="checkpoint_every must be a positive integer"):
        Store.open(store.url)


STEP = st.lists(st.tuples(st.sampled_from("ABC"), st.integers(0, 2), st.integers(0, 2)), max_size=4)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(every=st.integers(1, 4), steps=st.lists(STEP, min_size=1, max_size=9))
def test_every_version_equals_a_model_of_the_commits(
    every: int, steps: list[list[tuple[str, int, int]]]
) -> None:
    """Commits with replace=True against a dict model; every version read back cold."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.create(f"{tmp}/s", layout=Layout(chunk_rows=8), checkpoint_every=every)
        model: dict[tuple[str, str], str] = {}
        expected = [dict(model)]
        for step in steps:
            records = []
            for symbol, day, seed in step:
                rec = write_series(store, make_series(symbol, day, rows=3, seed=seed))
                records.append(rec)
            version = store.commit(segments=records, replace=True).version
            model |= {rec.key: rec.content_hash for rec in records}
            if model != expected[-1]:
                expected.append(dict(model))
            assert version == len(expected) - 1
        shutil.copytree(f"{tmp}/s", f"{tmp}/cold")  # another URL: nothing cached
        cold = Store.open(f"{tmp}/cold")
        for version, state in enumerate(expected):
            got = {s.key: s.content_hash for s in cold.version(version).segments}
            assert got == state, version
        cold.verify()
