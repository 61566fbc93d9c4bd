"""Store lifecycle: create, write, commit, versions, conflicts, and plain-zarr compatibility."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from ticktensor.errors import (
    SchemaError,
    StoreError,
    StoreNotFoundError,
    VersionConflictError,
    VersionNotFoundError,
)
from ticktensor.store import Codec, Layout, Store, open_store
from ticktensor.store.testing import write_segment

from .conftest import DAY_NS, FEATURES, LABELS, Series, make_series, write_series


def test_create_commit_read_roundtrip(store_url: str) -> None:
    store = Store.create(store_url)
    assert store.latest_version() == 0
    assert store.version().segments == ()
    series = [make_series(sym, 0) for sym in ("AAPL", "MSFT")]
    v1 = store.commit(segments=[write_series(store, s) for s in series], message="day 0")
    assert v1.version == 1
    assert v1.symbols == ("AAPL", "MSFT")
    assert v1.feature_names == FEATURES
    assert v1.label_names == LABELS
    assert v1.rows == 2000
    reopened = open_store(store_url)
    for s in series:
        data = reopened.read_segment(reopened.segment(s.symbol, s.session))
        np.testing.assert_array_equal(data.ts, s.ts)
        np.testing.assert_array_equal(data.values, s.values)
        assert data.labels is not None
        np.testing.assert_array_equal(data.labels, s.labels)


@pytest.mark.parametrize("codec", list(Codec))
def test_plain_zarr_opens_every_codec(tmp_path: os.PathLike[str], codec: Codec) -> None:
    store = Store.create(str(tmp_path), layout=Layout(codec=codec, chunk_rows=128))
    s = make_series("ES", 0, rows=1000)
    seg = write_series(store, s)
    version = store.commit(segments=[seg])
    rec = version.segments[0]
    root = os.path.join(str(tmp_path), rec.path)
    values = zarr.open_array(os.path.join(root, "values"), mode="r")
    assert values.shape == (1000, len(FEATURES))
    assert values.chunks == (128, len(FEATURES))
    np.testing.assert_array_equal(values[:], s.values)
    np.testing.assert_array_equal(zarr.open_array(os.path.join(root, "ts"), mode="r")[:], s.ts)
    group = zarr.open_group(root, mode="r")
    assert group.attrs["ticktensor"]["feature_names"] == list(FEATURES)  # type: ignore[index]
    n_chunks = -(-1000 // 128)
    assert {f"values/c/{i}/0" for i in range(n_chunks)} <= set(rec.files)


def test_uncompressed_chunks_are_raw_little_endian(tmp_path: os.PathLike[str]) -> None:
    # The "none" codec must stay memory-mappable: chunk i is rows [i*c, (i+1)*c) as raw f32.
    store = Store.create(str(tmp_path), layout=Layout(codec="none", chunk_rows=100))
    s = make_series("ES", 0, rows=250)
    rec = store.commit(segments=[write_series(store, s)]).segments[0]
    raw = np.fromfile(os.path.join(str(tmp_path), rec.path, "values/c/1/0"), dtype="<f4")
    np.testing.assert_array_equal(raw.reshape(100, len(FEATURES)), s.values[100:200])


def test_append_day_keeps_old_segments_and_versions(store_url: str) -> None:
    store = Store.create(store_url)
    d0 = make_series("AAPL", 0)
    v1 = store.commit(segments=[write_series(store, d0)])
    old_files = {
        name: store.location.read_bytes(f"{v1.segments[0].path}/{name}")
        for name in v1.segments[0].files
    }
    v2 = store.commit(segments=[write_series(store, make_series("AAPL", 1))])
    assert v2.version == 2
    assert [s.session for s in v2.segments] == ["2024-01-02", "2024-01-03"]
    assert v2.segments[0] == v1.segments[0]
    for name, data in old_files.items():
        assert store.location.read_bytes(f"{v1.segments[0].path}/{name}") == data
    pinned = store.version(1)
    assert [s.session for s in pinned.segments] == ["2024-01-02"]
    assert [m.version for m in store.versions()] == [0, 1, 2]
    assert store.versions()[2].parent == 1


def test_identical_rerun_is_idempotent(store_url: str) -> None:
    store = Store.create(store_url)
    s = make_series("AAPL", 0)
    first = store.commit(segments=[write_series(store, s)])
    again = write_series(store, s)
    assert again == first.segments[0]
    assert store.commit(segments=[again]).version == 1
    assert store.latest_version() == 1
    assert len(store.location.find("segments")) == len(first.segments[0].files)


def test_changed_content_conflicts_unless_replace(store_url: str) -> None:
    store = Store.create(store_url)
    s = make_series("AAPL", 0)
    store.commit(segments=[write_series(store, s)])
    changed = Series(s.symbol, s.session, s.ts, s.values + 1, s.labels)
    seg = write_series(store, changed)
    with pytest.raises(VersionConflictError, match="AAPL/2024-01-02 already exists in version 1"):
        store.commit(segments=[seg])
    v2 = store.commit(segments=[seg], replace=True)
    np.testing.assert_array_equal(v2.read_segment(v2.segments[0]).values, changed.values)
    np.testing.assert_array_equal(
        store.version(1).read_segment(store.version(1).segments[0]).values, s.values
    )


def test_stale_base_version_conflicts(store_url: str) -> None:
    store = Store.create(store_url)
    base = store.latest_version()
    store.commit(segments=[write_series(store, make_series("A", 0))])
    with pytest.raises(VersionConflictError, match="based on version 0 but the latest is 1"):
        store.commit(segments=[write_series(store, make_series("B", 0))], base_version=base)


def test_mixed_feature_names_rejected(store_url: str) -> None:
    store = Store.create(store_url)
    store.commit(segments=[write_series(store, make_series("A", 0))])
    s = make_series("B", 0)
    other = write_segment(
        store,
        symbol="B",
        session=s.session,
        ts=s.ts,
        values=s.values[:, :2],
        feature_names=("x", "y"),
    )
    with pytest.raises(SchemaError, match="has features \\['x', 'y'\\]"):
        store.commit(segments=[other])


@pytest.mark.parametrize(
    ("ts", "values", "match"),
    [
        (np.array([3, 2, 5], np.int64), np.zeros((3, 3), np.float32), "row 1 has 2 after 3"),
        (np.arange(3, dtype=np.int64), np.zeros((3, 2), np.float32), r"float32 \[3, 3\]"),
        (np.arange(3, dtype=np.int64), np.zeros((3, 3), np.float64), "got float64"),
        (np.zeros(0, np.int64), np.zeros((0, 3), np.float32), "at least one row"),
    ],
)
def test_bad_segment_input_names_the_problem(
    store_url: str, ts: np.ndarray, values: np.ndarray, match: str
) -> None:
    store = Store.create(store_url)
    with pytest.raises(SchemaError, match=match):
        write_segment(store, symbol="A", session="d", ts=ts, values=values, feature_names=FEATURES)


def test_open_errors(tmp_path: os.PathLike[str], store_url: str) -> None:
    with pytest.raises(StoreNotFoundError, match="no ticktensor store here"):
        Store.open(str(tmp_path))
    Store.create(store_url)
    with pytest.raises(StoreError, match="already exists"):
        Store.create(store_url)
    assert Store.create(store_url, exist_ok=True).latest_version() == 0
    with pytest.raises(VersionNotFoundError, match=r"version 3 does not exist \(versions 0..0\)"):
        Store.open(store_url).version(3)


def test_file_url_and_select(tmp_path: os.PathLike[str]) -> None:
    store = Store.create(f"file://{tmp_path}")
    segs = [write_series(store, make_series(sym, d)) for sym in ("A", "B") for d in (0, 1)]
    v = store.commit(segments=segs)
    assert [s.key for s in v.select(symbols=["B"])] == [("B", "2024-01-02"), ("B", "2024-01-03")]
    day1_start = 1_704_153_600 * 10**9 + DAY_NS
    assert {s.session for s in v.select(start=int(day1_start))} == {"2024-01-03"}
    assert {s.session for s in v.select(end=int(day1_start))} == {"2024-01-02"}


def test_event_tables_roundtrip(store_url: str) -> None:
    import pyarrow as pa

    store = Store.create(store_url)
    table = pa.table(
        {
            "ts_event": pa.array([5, 1, 9], pa.timestamp("ns", tz="UTC")),
            "price": [1.0, 2.0, 3.0],
        }
    )
    rec = store.write_table(kind="trades", symbol="A", session="2024-01-02", table=table)
    v = store.commit(tables=[rec])
    (stored,) = v.tables_of("trades")
    assert (stored.rows, stored.ts_start, stored.ts_end) == (3, 1, 9)
    assert v.read_table(stored).equals(table)
    assert (
        store.commit(
            tables=[store.write_table(kind="trades", symbol="A", session="2024-01-02", table=table)]
        ).version
        == 1
    )


@pytest.mark.parametrize("checkpoint_every", [10, 1])
def test_commit_flushes_new_files_and_log_once_before_the_pointer(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch, checkpoint_every: int
) -> None:
    from ticktensor.store._location import Location

    store = Store.create(
        str(tmp_path),
        layout=Layout(codec="zstd", chunk_rows=256),
        checkpoint_every=checkpoint_every,
    )
    events: list[str] = []
    write = Location.write_atomic
    flush = Location.flush

    def recording_write(self: Location, rel: str, data: bytes, **options: bool) -> None:
        durable = " (durable)" if options.get("durable", True) else ""
        events.append(f"write {rel.split('/', maxsplit=1)[0]}{durable}")
        write(self, rel, data, **options)

    def recording_flush(self: Location) -> None:
        events.append("flush")
        flush(self)  # the real syncfs, which must not fail on a local store

    monkeypatch.setattr(Location, "write_atomic", recording_write)
    monkeypatch.setattr(Location, "flush", recording_flush)
    record = write_series(store, make_series("AAPL", 0))
    store.commit(segments=[record])
    assert events.count("flush") == 1
    flushed = events.index("flush")
    # Data first, then the log (a checkpoint and the entry when one is due), none of
    # them flushed one by one; the one flush; then the pointer, durable itself.
    log = ["write versions"] * (2 if checkpoint_every == 1 else 1)
    assert events[flushed - len(log) : flushed] == log
    assert set(events[: flushed - len(log)]) == {"write segments"}
    assert events[flushed + 1 :] == ["write latest.json (durable)"]
