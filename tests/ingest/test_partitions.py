"""Partitions that fit the data's frequency: a pack per day for intraday data, per month or
year for data with few rows per session, one for all time for small low-frequency data;
the choice recorded in the store and kept."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from tests.ingest.store_contents import data_files
from ticktensor.cli import main
from ticktensor.errors import ConfigError, VersionConflictError
from ticktensor.ingest import (
    IngestOptions,
    IngestResult,
    choose_partition,
    ingest,
    partition_label,
)
from ticktensor.ingest._partition import partition_of_label
from ticktensor.ingest.readers import ReadOptions
from ticktensor.live import LiveEngine
from ticktensor.loaders import WindowDataset
from ticktensor.schemas import EventKind, FeatureSpec
from ticktensor.store import Store

DAY_NS = 86_400 * 10**9
HEADER = "ts_event,symbol,open,high,low,close,volume\n"


def _weekdays(first: date, last: date) -> list[date]:
    days, d = [], first
    while d <= last:
        if d.weekday() < 5:
            days.append(d)
        d += timedelta(days=1)
    return days


def _ns(d: date, seconds: int = 0) -> int:
    return int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()) * 10**9 + seconds * 10**9


def _bar(ts: int, symbol: str, close: float) -> str:
    return f"{ts},{symbol},{close:.4f},{close + 1:.4f},{close - 1:.4f},{close + 0.25:.4f},1000\n"


def daily_bars(
    path: Path, first: date, last: date, symbols: tuple[str, ...] = ("AAA",), shift: float = 0.0
) -> str:
    """One row per symbol per weekday from ``first`` to ``last`` (a vendor's daily file)."""
    lines = [
        _bar(_ns(d), s, 100.0 + (d - date(2000, 1, 1)).days * 0.01 + j + shift)
        for d in _weekdays(first, last)
        for j, s in enumerate(symbols)
    ]
    path.write_text(HEADER + "".join(lines))
    return str(path)


def minute_bars(path: Path, first: date, days: int, per_day: int = 390) -> str:
    lines = [
        _bar(_ns(d, 14 * 3600 + 30 * 60 + 60 * m), "AAA", 100.0 + 0.01 * m)
        for d in _weekdays(first, first + timedelta(days=days + 4))[:days]
        for m in range(per_day)
    ]
    path.write_text(HEADER + "".join(lines))
    return str(path)


def _run(files: list[str], out: Path, interval: int = DAY_NS, **kw: object) -> IngestResult:
    """Ingest ``files`` of bars ``interval`` ns long (one row files need it said)."""
    read = ReadOptions(kind=EventKind.OHLCV, interval_ns=interval)
    options = IngestOptions(read=read, workers=2, **kw)  # type: ignore[arg-type]
    result = ingest(files, str(out), options, progress=False)
    for f in result.files:
        assert f.rows_read == f.rows_stored + f.rows_quarantined
    return result


def _sessions(out: Path, version: int | None = None) -> list[str]:
    return sorted(p.session for p in Store.open(str(out)).version(version).packs)


def test_labels_of_each_partition() -> None:
    assert partition_label("2024-03-05", "day") == "2024-03-05"
    assert partition_label("2024-03-05", "month") == "2024-03"
    assert partition_label("2024-03-05", "year") == "2024"
    assert partition_label("2024-03-05", "all") == "all"
    assert [partition_of_label(s) for s in ("2024-03-05", "2024-03", "2024", "all")] == [
        "day",
        "month",
        "year",
        "all",
    ]


def test_auto_keeps_small_daily_bars_whole(tmp_path: Path) -> None:
    out = tmp_path / "store"
    result = _run([daily_bars(tmp_path / "d.csv", date(2022, 1, 3), date(2024, 6, 28))], out)
    assert _sessions(out) == ["all"]
    assert result.partition == "all"
    assert result.rows_stored == len(_weekdays(date(2022, 1, 3), date(2024, 6, 28)))
    assert Store.open(str(out)).version().manifest.attributes["partition"] == "all"
    again = _run([str(tmp_path / "d.csv")], out)  # the same file again: nothing to write
    assert not again.published


def _source_rows(*paths: Path) -> dict[str, np.ndarray]:
    """The columns of daily bar files as written (``HEADER``'s), in file order."""
    lines = [line for p in paths for line in p.read_text().splitlines()[1:]]
    fields = [line.split(",") for line in lines]
    names = HEADER.strip().split(",")
    cols = {n: [f[i] for f in fields] for i, n in enumerate(names)}
    return {
        "ts_event": np.array(cols["ts_event"], dtype=np.int64),
        "symbol": np.array(cols["symbol"]),
        **{n: np.array(cols[n], dtype=np.float64) for n in ("open", "high", "low", "close")},
        "volume": np.array(cols["volume"], dtype=np.float64),
    }


def test_twenty_years_of_daily_bars_are_one_pack_and_an_append_rewrites_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "store"
    history = Path(daily_bars(tmp_path / "a.csv", date(2005, 1, 3), date(2024, 12, 27)))
    first = _run([str(history)], out)
    assert first.partition == "all"
    assert first.rows_stored == len(_weekdays(date(2005, 1, 3), date(2024, 12, 27))) > 5_000
    assert _sessions(out) == ["all"]
    objects = [p for p in out.rglob("*") if p.is_file()]
    assert len(objects) <= 20, sorted(str(p.relative_to(out)) for p in objects)
    before = {p: p.read_bytes() for p in objects if p.parts[len(out.parts)] in ("events", "packs")}
    old = Store.open(str(out)).version().pack("all")

    day = Path(daily_bars(tmp_path / "b.csv", date(2024, 12, 30), date(2024, 12, 30)))
    appended = _run([str(day)], out)
    assert appended.published
    assert appended.rows_read == appended.rows_stored == 1
    v = Store.open(str(out)).version()
    assert [p.session for p in v.packs] == ["all"]
    assert v.pack("all").path != old.path
    assert v.pack("all").rows == old.rows + 1
    for path, data in before.items():  # copy-on-write: nothing written is touched
        assert path.read_bytes() == data
    written = {p for p in out.rglob("*") if p.is_file()} - set(before)
    data = {p for p in written if p.parts[len(out.parts)] in ("events", "packs")}
    assert data
    assert all(any(q.startswith("all-") for q in p.relative_to(out).parts) for p in data)
    # The live engine cuts sessions as the store does: "all" is one session.
    live = LiveEngine(FeatureSpec(("mid",)), session=v.manifest.attributes["partition"])
    assert live.session == "all"

    # The stored events are the source rows, exactly, in order.
    table = v.read_table(next(t for t in v.tables if t.session == "all"))
    want = _source_rows(history, day)
    assert table.num_rows == len(want["ts_event"])
    np.testing.assert_array_equal(
        table.column("ts_event").cast("int64").to_numpy(), want["ts_event"]
    )
    np.testing.assert_array_equal(
        table.column("symbol").to_numpy(zero_copy_only=False), want["symbol"]
    )
    for name in ("open", "high", "low", "close", "volume"):
        np.testing.assert_array_equal(table.column(name).to_numpy(), want[name])
    # The features are those of the whole series ingested at once.
    whole = tmp_path / "whole"
    history_and_day = tmp_path / "w.csv"
    history_and_day.write_text(history.read_text() + "".join(day.read_text().splitlines(True)[1:]))
    _run([str(history_and_day)], whole)
    ref = Store.open(str(whole)).version()
    got, expected = v.read_pack(v.pack("all")), ref.read_pack(ref.pack("all"))
    np.testing.assert_array_equal(got.ts, expected.ts)
    np.testing.assert_array_equal(got.values, expected.values)
    np.testing.assert_array_equal(got.labels, expected.labels)


def test_auto_picks_year_for_a_wide_universe_of_daily_bars(tmp_path: Path) -> None:
    days = [(d.isoformat(), 500, 500) for d in _weekdays(date(2023, 1, 2), date(2024, 6, 28))]
    assert choose_partition("auto", days) == "year"
    # 80 symbols of daily bars: a year of them (20,160 rows) is more than one pack should
    # take by appends.
    symbols = tuple(f"S{i:02d}" for i in range(80))
    out = tmp_path / "store"
    _run([daily_bars(tmp_path / "d.csv", date(2023, 10, 2), date(2024, 2, 29), symbols)], out)
    assert _sessions(out) == ["2023", "2024"]


def test_auto_picks_month_for_hourly_bars(tmp_path: Path) -> None:
    # 12 symbols of 7 bars a session: 21,168 rows a year, more than one pack should take.
    out, lines, symbols = tmp_path / "store", [], [f"S{i:02d}" for i in range(12)]
    for d in _weekdays(date(2024, 1, 2), date(2024, 3, 29)):
        lines += [_bar(_ns(d, 3600 * (14 + h)), s, 100.0 + h) for h in range(7) for s in symbols]
    (tmp_path / "h.csv").write_text(HEADER + "".join(lines))
    _run([str(tmp_path / "h.csv")], out, interval=3600 * 10**9)
    assert _sessions(out) == ["2024-01", "2024-02", "2024-03"]
    # One symbol of them: 1,764 rows a year, kept whole.
    one = [(f"2024-01-{d:02d}", 7, 1) for d in range(2, 30)]
    assert choose_partition("auto", one) == "all"


def test_auto_picks_day_for_minute_bars(tmp_path: Path) -> None:
    out = tmp_path / "store"
    _run([minute_bars(tmp_path / "m.csv", date(2024, 1, 2), days=3)], out, interval=60 * 10**9)
    assert _sessions(out) == ["2024-01-02", "2024-01-03", "2024-01-04"]
    assert Store.open(str(out)).version().manifest.attributes["partition"] == "day"


def test_auto_picks_day_for_a_wide_minute_universe() -> None:
    # W1: 5,000 symbols x 390 one-minute bars a session, one file per session.
    days = [(f"2024-01-{d:02d}", 5_000 * 390, 5_000) for d in range(2, 22)]
    assert choose_partition("auto", days) == "day"
    few = [("2024-01-02", 500, 500), ("2024-01-03", 500, 500)]
    assert choose_partition("auto", few) == "year"
    assert choose_partition("auto", few[:1]) == "day"  # one day says nothing
    assert choose_partition("month", days) == "month"
    with pytest.raises(ConfigError, match="'week'"):
        choose_partition("auto", days, stored="week")


def test_explicit_partition_overrides_auto(tmp_path: Path) -> None:
    out = tmp_path / "store"
    _run(
        [daily_bars(tmp_path / "d.csv", date(2024, 1, 2), date(2024, 3, 29))],
        out,
        partition="month",
    )
    assert _sessions(out) == ["2024-01", "2024-02", "2024-03"]


def test_partition_flag_of_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "store"
    src = daily_bars(tmp_path / "d.csv", date(2024, 1, 2), date(2024, 1, 5))
    code = main(["ingest", src, "--out", str(out), "--schema", "ohlcv", "--partition", "day",
                 "--quiet"])  # fmt: skip
    assert code == 0
    assert _sessions(out) == ["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"]


def test_append_rewrites_only_its_partition(tmp_path: Path) -> None:
    out = tmp_path / "store"
    _run(
        [daily_bars(tmp_path / "a.csv", date(2022, 1, 3), date(2024, 12, 27))],
        out,
        partition="year",
    )
    store = Store.open(str(out))
    before, old = data_files(out), {p.session: p for p in store.version().packs}
    result = _run([daily_bars(tmp_path / "b.csv", date(2024, 12, 30), date(2024, 12, 30))], out)
    assert result.published
    assert result.rows_read == result.rows_stored == 1
    after = {p.session: p for p in Store.open(str(out)).version().packs}
    assert sorted(after) == ["2022", "2023", "2024"]
    assert after["2022"] == old["2022"]
    assert after["2023"] == old["2023"]
    assert after["2024"].path != old["2024"].path
    assert after["2024"].rows == old["2024"].rows + 1
    files = data_files(out)
    for path, data in before.items():  # copy-on-write: nothing written is touched
        assert files[path] == data
    written = set(files) - set(before)
    assert written
    assert all("2024" in p for p in written)
    # The appended partition is the series of the first ingest and the day after it.
    whole = tmp_path / "whole"
    _run(
        [daily_bars(tmp_path / "w.csv", date(2024, 1, 1), date(2024, 12, 30))],
        whole,
        partition="year",
    )
    mine = Store.open(str(out)).version()
    ref = Store.open(str(whole)).version()
    got, want = mine.read_pack(mine.pack("2024")), ref.read_pack(ref.pack("2024"))
    np.testing.assert_array_equal(got.ts, want.ts)
    np.testing.assert_array_equal(got.values, want.values)
    assert mine.read_table(next(t for t in mine.tables if t.session == "2024")).num_rows == len(
        _weekdays(date(2024, 1, 1), date(2024, 12, 30))
    )


def test_append_keeps_other_symbols_and_days(tmp_path: Path) -> None:
    out = tmp_path / "store"
    a = daily_bars(tmp_path / "a.csv", date(2024, 1, 2), date(2024, 6, 28), ("AAA", "BBB"))
    _run([a], out, partition="year")
    _run([daily_bars(tmp_path / "b.csv", date(2024, 7, 1), date(2024, 7, 1), ("AAA",))], out)
    v = Store.open(str(out)).version()
    table = v.read_table(next(t for t in v.tables if t.session == "2024"))
    n = len(_weekdays(date(2024, 1, 2), date(2024, 6, 28)))
    assert table.num_rows == 2 * n + 1
    index = v.pack_index(v.pack("2024"))
    assert sorted(index.symbols) == ["AAA", "BBB"]


def test_a_day_again_is_unchanged_and_other_values_conflict(tmp_path: Path) -> None:
    out = tmp_path / "store"
    _run(
        [daily_bars(tmp_path / "a.csv", date(2024, 1, 2), date(2024, 6, 28))], out, partition="year"
    )
    again = _run([daily_bars(tmp_path / "b.csv", date(2024, 3, 4), date(2024, 3, 4))], out)
    assert not again.published
    other = daily_bars(tmp_path / "c.csv", date(2024, 3, 4), date(2024, 3, 4), shift=5.0)
    with pytest.raises(VersionConflictError, match="session 2024 "):
        _run([other], out)
    fixed = _run([other], out, replace=True)
    assert fixed.published
    v = Store.open(str(out)).version()
    assert v.pack("2024").rows == len(_weekdays(date(2024, 1, 2), date(2024, 6, 28)))


def test_recorded_partition_is_reused_and_a_conflicting_one_refused(tmp_path: Path) -> None:
    out = tmp_path / "store"
    _run(
        [daily_bars(tmp_path / "a.csv", date(2024, 1, 2), date(2024, 2, 28))],
        out,
        partition="month",
    )
    # Two rows of two days would be "all" for auto: the store's month is kept.
    _run([daily_bars(tmp_path / "b.csv", date(2024, 2, 29), date(2024, 3, 1))], out)
    assert _sessions(out) == ["2024-01", "2024-02", "2024-03"]
    _run(
        [daily_bars(tmp_path / "c.csv", date(2024, 3, 4), date(2024, 3, 4))], out, partition="month"
    )
    with pytest.raises(ConfigError, match=r"partition.*month.*year"):
        _run(
            [daily_bars(tmp_path / "d.csv", date(2024, 3, 5), date(2024, 3, 5))],
            out,
            partition="year",
        )


def test_a_store_without_a_recorded_partition_keeps_days(tmp_path: Path) -> None:
    # A store written before partitions were recorded: its sessions are days.
    out = tmp_path / "store"
    store = Store.create(str(out))
    src = daily_bars(tmp_path / "old.csv", date(2023, 12, 1), date(2023, 12, 1))
    table = _run([src], tmp_path / "scratch").version
    old = table.read_table(next(t for t in table.tables if t.kind == "ohlcv"))
    record = store.write_table(kind="ohlcv", symbol="AAA", session="2023-12-01", table=old)
    store.commit(tables=[record], message="an older ticktensor's day")
    assert "partition" not in store.version().manifest.attributes
    _run([daily_bars(tmp_path / "d.csv", date(2024, 1, 2), date(2024, 3, 29))], out)
    assert _sessions(out)[:2] == ["2024-01-02", "2024-01-03"]
    assert Store.open(str(out)).version().manifest.attributes["partition"] == "day"
    assert choose_partition("auto", [("2024-01-02", 1, 1)], stored="day") == "day"


def test_windows_span_days_within_a_partition(tmp_path: Path) -> None:
    out = tmp_path / "store"
    _run(
        [daily_bars(tmp_path / "d.csv", date(2024, 1, 2), date(2024, 6, 28))], out, partition="year"
    )
    ds = WindowDataset(str(out), window=20)
    assert len(ds) > 0
    first, last = ds.sample_first_ts, ds.sample_ts
    assert (last - first).max() >= 19 * DAY_NS  # a window spans many days
    pack = Store.open(str(out)).version().pack("2024")
    assert len(ds) <= pack.rows - 20 + 1
    # Time filters read the rows' times, not the partition's label.
    march = WindowDataset(
        str(out), window=5, start=_ns(date(2024, 3, 1)), end=_ns(date(2024, 4, 1))
    )
    ts = Store.open(str(out)).version().read_pack(pack).ts  # bar ends: a day after the open
    assert len(march) == ((ts >= _ns(date(2024, 3, 1))) & (ts < _ns(date(2024, 4, 1)))).sum()
    assert march.sample_ts.min() >= _ns(date(2024, 3, 1))
    assert march.sample_ts.max() < _ns(date(2024, 4, 1))


def test_verify_info_and_time_travel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "store"
    _run(
        [daily_bars(tmp_path / "a.csv", date(2023, 1, 2), date(2024, 6, 28))], out, partition="year"
    )
    _run([daily_bars(tmp_path / "b.csv", date(2024, 7, 1), date(2024, 7, 2))], out)
    assert main(["verify", str(out)]) == 0
    capsys.readouterr()
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["sessions"] == ["2023", "2024"]
    assert info["partition"] == "year"
    assert main(["info", str(out)]) == 0
    assert "(partition year)" in capsys.readouterr().out
    store = Store.open(str(out))
    old, new = store.version(store.latest_version() - 1), store.version()
    n = len(_weekdays(date(2024, 1, 1), date(2024, 6, 28)))
    assert old.read_pack(old.pack("2024")).ts.shape[0] == n
    assert new.read_pack(new.pack("2024")).ts.shape[0] == n + 2
    assert main(["verify", str(out), "--version", str(old.version)]) == 0


def test_migrate_leaves_partitions_and_the_dataloader_reads_them(tmp_path: Path) -> None:
    import torch

    from ticktensor import DataLoader

    out = tmp_path / "store"
    _run([daily_bars(tmp_path / "a.csv", date(2023, 1, 2), date(2024, 6, 28))], out)
    latest = Store.open(str(out)).latest_version()
    assert main(["migrate", str(out)]) == 0
    assert Store.open(str(out)).latest_version() == latest  # nothing held by segments
    store = Store.open(str(out))
    old = WindowDataset(store.version(latest), window=10)
    loader = DataLoader(old, batch_size=32)
    batches = list(loader)
    assert sum(
        b[0].shape[0] if isinstance(b, (list, tuple)) else b.shape[0] for b in batches
    ) == len(old)
    first = batches[0][0] if isinstance(batches[0], (list, tuple)) else batches[0]
    assert isinstance(first, torch.Tensor)
    assert first.shape[1] == 10


def test_time_splits_cut_inside_a_partition(tmp_path: Path) -> None:
    from ticktensor.loaders import time_splits

    out = tmp_path / "store"
    _run([daily_bars(tmp_path / "d.csv", date(2024, 1, 2), date(2024, 12, 27))], out)
    ds = WindowDataset(str(out), window=5)
    cut = _ns(date(2024, 7, 1))
    train, valid = time_splits(ds, [cut], horizon_ns=10 * DAY_NS, embargo_ns=DAY_NS)
    assert len(train) > 100 and len(valid) > 100  # noqa: PT018 - both sides of one pack
    assert (ds.sample_ts[train] + 10 * DAY_NS < cut).all()
    assert (ds.sample_first_ts[valid] >= cut + DAY_NS).all()


def test_files_of_one_partition_keep_their_own_accounting(tmp_path: Path) -> None:
    out = tmp_path / "store"
    a = daily_bars(tmp_path / "a.csv", date(2024, 1, 2), date(2024, 6, 28), ("AAA",))
    b = daily_bars(tmp_path / "b.csv", date(2024, 1, 2), date(2024, 3, 29), ("BBB",))
    result = _run([a, b], out, partition="year")
    rows = {Path(f.file).name: f.rows_stored for f in result.files}
    assert rows == {
        "a.csv": len(_weekdays(date(2024, 1, 2), date(2024, 6, 28))),
        "b.csv": len(_weekdays(date(2024, 1, 2), date(2024, 3, 29))),
    }
    assert _sessions(out) == ["2024"]
