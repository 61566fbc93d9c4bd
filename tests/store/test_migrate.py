"""migrate: each session's segments become one checked pack; old versions keep their segments."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ticktensor.errors import ConfigError, SchemaError, StoreCorruptError, VersionConflictError
from ticktensor.store import Layout, Store, StoreVersion, migrate
from ticktensor.store._segments import read_checked_segment

from .conftest import make_series, write_series

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _generator(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, FIXTURES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _symbol_rows(version: StoreVersion) -> dict[tuple[str, str], tuple[np.ndarray, ...]]:
    """Every (symbol, session)'s ts, values and labels, from its segment or its pack."""
    out = {}
    for seg in version.segments:
        data = version.read_segment(seg)
        out[seg.key] = (data.ts, data.values, data.labels)
    for pack in version.packs:
        packed = version.read_pack(pack)
        for i, symbol in enumerate(packed.symbols):
            lo, hi = int(packed.offsets[i]), int(packed.offsets[i + 1])
            labels = None if packed.labels is None else packed.labels[lo:hi]
            out[(symbol, pack.session)] = (packed.ts[lo:hi], packed.values[lo:hi], labels)
    return out


def _assert_same_rows(a: StoreVersion, b: StoreVersion) -> None:
    rows_a, rows_b = _symbol_rows(a), _symbol_rows(b)
    assert sorted(rows_a) == sorted(rows_b)
    for key, arrays in rows_a.items():
        for x, y in zip(arrays, rows_b[key], strict=True):
            np.testing.assert_array_equal(x, y, err_msg=str(key))


@pytest.mark.parametrize("fixture", ["store-v1", "store-v2"])
def test_migrating_a_frozen_fixture(tmp_path: Path, fixture: str) -> None:
    root = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, root)
    store = Store.open(str(root))
    before = store.version()
    files = _files(root)

    plan = migrate(store, dry_run=True)
    assert [(s.session, s.segments, s.rows, s.pack) for s in plan.sessions] == [
        ("2023-11-14", 2, 300, None)
    ]
    assert plan.versions == []
    assert _files(root) == files  # a dry run writes nothing

    report = migrate(store)
    assert report.versions == [before.version + 1]
    after = store.version()
    assert after.segments == ()
    # The v2 fixture holds a pack of 2023-11-15 already: it stays as it is.
    assert [p.session for p in after.packs] == sorted(
        ["2023-11-14", *(p.session for p in before.packs)]
    )
    pack = after.pack("2023-11-14")
    assert pack == report.sessions[0].pack
    assert (pack.session, pack.symbols, pack.rows) == ("2023-11-14", 2, 300)
    assert after.symbols == ("AAA", "B/B")
    assert after.tables == before.tables  # event tables are left as they are
    assert (after.stats, after.feature_names, after.label_names) == (
        before.stats,
        before.feature_names,
        before.label_names,
    )
    _assert_same_rows(before, after)
    # Nothing published was rewritten: the migration only added files.
    assert {k: v for k, v in _files(root).items() if k in files and k != "latest.json"} == {
        k: v for k, v in files.items() if k != "latest.json"
    }
    # Time travel before the migration still reads the segments.
    old = Store.open(str(root)).version(before.version)
    assert [s.path for s in old.segments] == [s.path for s in before.segments]
    _assert_same_rows(old, before)
    for version in range(store.latest_version() + 1):
        store.verify(version)

    files = _files(root)
    again = migrate(store)
    assert (again.sessions, again.versions) == ([], [])
    assert again.already_packed == len(after.packs)
    assert _files(root) == files  # a second run changes nothing


def test_v1_fixture_migrated_reads_the_fixture_formula(tmp_path: Path) -> None:
    expected = _generator("make_store_v1").expected
    root = tmp_path / "store-v1"
    shutil.copytree(FIXTURES / "store-v1", root)
    store = Store.open(str(root))
    migrate(store)
    assert store.format_version == 2  # the migration is a format-2 log entry
    v = store.version()
    data = v.read_pack(v.pack("2023-11-14"), verify=True)
    assert data.symbols == ("AAA", "B/B")
    for i, symbol in enumerate(data.symbols):
        ts, values, labels = expected(symbol, 150)
        lo, hi = data.offsets[i], data.offsets[i + 1]
        np.testing.assert_array_equal(data.ts[lo:hi], ts)
        np.testing.assert_array_equal(data.values[lo:hi], values)
        assert data.labels is not None
        np.testing.assert_array_equal(data.labels[lo:hi], labels)


def _store(root: Path, days: int = 3, layout: Layout | None = None) -> Store:
    store = Store.create(str(root), layout=layout or Layout(chunk_rows=64))
    for day in range(days):
        segs = [write_series(store, make_series(s, day, rows=150)) for s in ("C", "A", "B")]
        store.commit(segments=segs, message=f"day {day}")
    return store


def test_one_commit_per_run_or_per_n_sessions(tmp_path: Path) -> None:
    one = _store(tmp_path / "one", days=5)
    seen: list[str] = []
    report = migrate(one, on_session=lambda item: seen.append(item.session))
    assert seen == [f"2024-01-0{2 + d}" for d in range(5)]
    assert report.versions == [6]
    assert (report.segments, report.rows) == (15, 15 * 150)
    assert report.read_through_zarr == 0  # every segment in the form ticktensor writes
    assert one.version(6).manifest.message == (
        "migrate 5 session(s) from segments to packs: 2024-01-02 .. 2024-01-06"
    )

    steps = _store(tmp_path / "steps", days=5)
    report = migrate(steps, commit_every=2)
    assert report.versions == [6, 7, 8]
    assert [len(steps.version(v).packs) for v in (6, 7, 8)] == [2, 4, 5]
    assert [len(steps.version(v).segments) for v in (6, 7, 8)] == [9, 3, 0]
    _assert_same_rows(one.version(), steps.version())
    assert [p.path for p in one.version().packs] == [p.path for p in steps.version().packs]


def test_only_the_sessions_asked_for(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    report = migrate(store, sessions=["2024-01-03"])
    assert [s.session for s in report.sessions] == ["2024-01-03"]
    v = store.version()
    assert [p.session for p in v.packs] == ["2024-01-03"]
    assert sorted({s.session for s in v.segments}) == ["2024-01-02", "2024-01-04"]
    assert migrate(store, sessions=["2024-01-03"]).versions == []  # already a pack
    with pytest.raises(ConfigError, match=r"version 4 has no session '2031-01-01'"):
        migrate(store, sessions=["2031-01-01"])


def test_the_pack_layout(tmp_path: Path) -> None:
    zstd = Layout(codec="zstd", chunk_rows=32)
    store = _store(tmp_path / "s", days=2, layout=zstd)
    migrate(store, sessions=["2024-01-02"])  # the segments' shared layout
    migrate(store, layout=Layout(codec="lz4", chunk_rows=100))
    layouts = {p.session: dict(p.layout) for p in store.version().packs}
    assert layouts == {
        "2024-01-02": zstd.to_dict(),
        "2024-01-03": Layout(codec="lz4", chunk_rows=100).to_dict(),
    }
    mixed = Store.create(str(tmp_path / "mixed"), layout=Layout(chunk_rows=50))
    mixed.commit(
        segments=[
            write_series(mixed, make_series("A", 0), layout=zstd),
            write_series(mixed, make_series("B", 0), layout=Layout(codec="blosc")),
        ]
    )
    migrate(mixed)  # the segments differ: the store's default layout
    assert dict(mixed.version().packs[0].layout) == Layout(chunk_rows=50).to_dict()


def test_a_damaged_segment_stops_the_migration_before_any_commit(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    seg = store.version().segment("B", "2024-01-03")
    chunk = tmp_path / "s" / seg.path / "values/c/1/0"
    data = bytearray(chunk.read_bytes())
    data[5] ^= 0x10
    chunk.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match="B/2024-01-03"):
        migrate(store)
    assert store.latest_version() == 3
    assert store.version().packs == ()


def _gappy_store(root: Path, layout: Layout) -> Store:
    """Segments of several chunks whose all-NaN chunks were never written (a values
    chunk at the end, a labels chunk at the start), and a last chunk cut short."""
    store = Store.create(str(root), layout=layout)
    segs = []
    for i, symbol in enumerate(("A", "B", "C", "D")):
        s = make_series(symbol, 0, rows=150 - 7 * i)
        if i % 2:
            s.values[128:] = np.nan
        if i >= 2:
            s.labels[:32] = np.nan
        segs.append(write_series(store, s))
    store.commit(segments=segs)
    return store


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4", "blosc"])
def test_segments_read_here_equal_what_zarr_python_reads(tmp_path: Path, codec: str) -> None:
    store = _gappy_store(tmp_path / "s", Layout(codec=codec, chunk_rows=32))
    before = store.version()
    assert any(len(r.files) < len(before.segments[0].files) for r in before.segments)
    for rec in before.segments:
        rows = read_checked_segment(before.location, rec)
        assert rows is not None
        data = before.read_segment(rec, verify=True)
        for x, y in zip(rows, (data.ts, data.values, data.labels), strict=True):
            assert x is not None
            assert y is not None
            np.testing.assert_array_equal(x, y, err_msg=rec.symbol)
            assert x.dtype == y.dtype
    migrate(store)
    _assert_same_rows(before, store.version())


def test_segments_not_in_the_form_ticktensor_writes_are_read_by_zarr_python(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path / "s", days=1)
    v = store.version()
    rec = v.segments[0]
    unlisted = dataclasses.replace(rec, files={})  # records of old manifests list no files
    assert read_checked_segment(v.location, unlisted) is None
    other = dataclasses.replace(rec, layout=Layout(codec="zstd", chunk_rows=64).to_dict())
    assert read_checked_segment(v.location, other) is None
    with pytest.raises(StoreCorruptError, match="rule: segment_metadata"):
        v.read_segment(other, verify=True)  # what migrate then raises


def _missing(chunk: Path) -> None:
    chunk.unlink()


def _cut(chunk: Path) -> None:
    chunk.write_bytes(chunk.read_bytes()[:-3])


def _unlisted(chunk: Path) -> None:
    where = chunk.parent.parent / "2" / "0"  # the next chunk, which was never written
    where.parent.mkdir()
    where.write_bytes(chunk.read_bytes())


@pytest.mark.parametrize(
    ("damage", "key", "why"),
    [
        (_missing, "values/c/1/0", "file is missing"),
        (_cut, "values/c/1/0", "bytes stored, the manifest records"),
        (_cut, "labels/zarr.json", "bytes stored, the manifest records"),
        (_unlisted, "values/c/1/0", "values/c/2/0: file is not listed in the manifest"),
    ],
)
def test_any_damage_to_a_segment_stops_the_migration(
    tmp_path: Path, damage: Any, key: str, why: str
) -> None:
    store = _store(tmp_path / "s", days=2)
    values = np.full((150, 3), np.nan, np.float32)  # its last chunk is never written
    values[:128] = make_series("B", 1, rows=150).values[:128]
    series = dataclasses.replace(make_series("B", 1, rows=150), values=values)
    seg = write_series(store, series)
    store.commit(segments=[seg], replace=True)
    assert "values/c/2/0" not in seg.files
    damage(tmp_path / "s" / seg.path / key)
    with pytest.raises(StoreCorruptError, match=f"segment B/2024-01-03 chunk .*{why}"):
        migrate(store)
    assert store.latest_version() == 3
    assert store.version().packs == ()


def test_a_pack_that_does_not_hold_the_segments_is_not_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path / "s", days=1)
    write_pack = store.write_pack

    def skewed(**arrays: Any) -> Any:  # a writer that gets one value wrong
        values = arrays["values"].copy()
        values[160, 1] += 1
        return write_pack(**{**arrays, "values": values})

    monkeypatch.setattr(store, "write_pack", skewed)
    with pytest.raises(
        StoreCorruptError,
        match=r"rows 150:300 of B do not hash to segment B/2024-01-02's content hash",
    ):
        migrate(store)
    assert store.latest_version() == 1


def test_segments_of_one_session_with_other_names_are_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version keeps one set of names, so only a forged state can hold two; migrate
    still says which segments differ rather than writing a pack of mixed columns."""
    store = _store(tmp_path / "s", days=1)
    v = store.version()
    a, b, c = v.segments
    odd = dataclasses.replace(b, feature_names=("ret", "spread", "volume"))
    forged = StoreVersion(v.location, v.manifest.evolve(segments=(a, odd, c)))
    monkeypatch.setattr(store, "version", lambda version=None: forged)
    with pytest.raises(
        SchemaError,
        match=r"session 2024-01-02: segment B has features \['ret', 'spread', 'volume'\]",
    ):
        migrate(store, dry_run=True)


def test_a_writer_committing_meanwhile_is_a_conflict_and_a_rerun_finishes(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path / "s", days=2)
    other = Store.open(store.url)
    late = make_series("D", 1, rows=150)

    def meanwhile(item: Any) -> None:
        if item.session == "2024-01-02":  # another ingest adds a symbol to session 2
            other.commit(segments=[write_series(other, late)])

    with pytest.raises(VersionConflictError, match="run migrate again"):
        migrate(store, on_session=meanwhile)
    assert store.version().packs == ()
    report = migrate(store)
    assert [s.segments for s in report.sessions] == [3, 4]
    v = store.version()
    assert v.segments == ()
    assert v.pack_index(v.pack("2024-01-03")).symbols == ("A", "B", "C", "D")


def test_argument_checks(tmp_path: Path) -> None:
    store = _store(tmp_path / "s", days=1)
    with pytest.raises(ConfigError, match="commit_every must be an integer >= 0, got -1"):
        migrate(store, commit_every=-1)
    with pytest.raises(ConfigError, match="threads must be a positive integer, got 0"):
        migrate(store, threads=0)
