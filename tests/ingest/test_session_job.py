"""The ingest job a session at a time: per session, one pack of every symbol's features
and one events table per kind; against a per-symbol reference, reruns and quarantine."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from ticktensor.cli import main
from ticktensor.errors import VersionConflictError
from ticktensor.ingest import (
    IngestOptions,
    SyntheticMarket,
    compute_features,
    generate_day,
    ingest,
)
from ticktensor.ingest.readers import ReadOptions
from ticktensor.schemas import EventKind, FeatureSpec, LabelSpec, conform
from ticktensor.store import Store, StoreVersion
from ticktensor.store.testing import write_segment

MARKET = SyntheticMarket(
    symbols=("AAA", "BBB", "CCC", "DDD"),
    n_days=2,
    quotes_per_day=600.0,
    trades_per_day=200.0,
    seed=11,
)
SESSIONS = [str(d) for d in MARKET.days]
COLUMNS = {
    EventKind.QUOTES: ["ts_event", "symbol", "bid_px", "ask_px", "bid_sz", "ask_sz"],
    EventKind.TRADES: ["ts_event", "symbol", "price", "size", "side"],
}


def _csv(table: pa.Table, path: Path) -> str:
    table = table.set_column(0, "ts_event", table.column("ts_event").cast(pa.int64()))
    pacsv.write_csv(table, path, pacsv.WriteOptions(quoting_style="none"))
    return str(path)


def _events(symbol: str, session: int, kind: EventKind) -> pa.Table:
    """The canonical events of one symbol and session, as the vendor files hold them."""
    table = generate_day(MARKET, symbol, MARKET.days[session])[kind].select(COLUMNS[kind])
    return conform(table, kind)


def market_files(tmp: Path) -> list[str]:
    """Per day: every symbol's quotes in one file in time order (a vendor's daily file),
    and one trades file per symbol."""
    files = []
    for day in range(len(SESSIONS)):
        quotes = pa.concat_tables(_events(s, day, EventKind.QUOTES) for s in MARKET.symbols)
        quotes = quotes.take(pc.sort_indices(quotes, [("ts_event", "ascending")]))
        files.append(_csv(quotes.select(COLUMNS[EventKind.QUOTES]), tmp / f"quotes-{day}.csv"))
        for symbol in MARKET.symbols:
            trades = _events(symbol, day, EventKind.TRADES).select(COLUMNS[EventKind.TRADES])
            files.append(_csv(trades, tmp / f"trades-{symbol}-{day}.csv"))
    return files


def opts(**kw: object) -> IngestOptions:
    kw.setdefault("workers", 2)
    return IngestOptions(format="csv", **kw)  # type: ignore[arg-type]


def _sorted_by_symbol_then_time(table: pa.Table) -> bool:
    order = pc.sort_indices(table, [("symbol", "ascending"), ("ts_event", "ascending")])
    return bool(np.array_equal(order.to_numpy(), np.arange(table.num_rows)))


def _pack_rows(version: StoreVersion, session: str, symbol: str) -> tuple[np.ndarray, ...]:
    pack = version.pack(session)
    lo, hi = version.pack_index(pack).rows_of(symbol)
    data = version.read_pack(pack)
    assert data.labels is not None
    return data.ts[lo:hi], data.values[lo:hi], data.labels[lo:hi]


def test_a_pack_and_one_table_per_kind_for_each_session(tmp_path: Path) -> None:
    files = market_files(tmp_path)
    result = ingest(files, str(tmp_path / "store"), opts(), progress=False)
    assert result.rows_quarantined == 0
    assert (result.packs, result.series) == (2, 8)
    v = result.version
    assert v.segments == ()
    assert [p.session for p in v.packs] == SESSIONS
    for pack in v.packs:
        assert v.pack_index(pack).symbols == MARKET.symbols
    assert v.symbols == MARKET.symbols  # a table's "*" key is not a symbol
    for kind in ("quotes", "trades"):
        records = v.tables_of(kind)
        assert [(t.symbol, t.session) for t in records] == [("*", s) for s in SESSIONS]
        for record in records:
            table = v.read_table(record)
            assert _sorted_by_symbol_then_time(table)
            assert set(table.column("symbol").to_pylist()) == set(MARKET.symbols)
            # Every row group says which symbols it holds, so a reader can skip the others.
            meta = pq.ParquetFile(v.file_url(record.path)).metadata
            column = table.column_names.index("symbol")
            bounds = [
                (meta.row_group(g).column(column).statistics.min,
                 meta.row_group(g).column(column).statistics.max)
                for g in range(meta.num_row_groups)
            ]  # fmt: skip
            assert bounds == sorted(bounds)
            assert bounds[0][0] == MARKET.symbols[0]
            assert bounds[-1][1] == MARKET.symbols[-1]
    assert sum(t.rows for t in v.tables) == result.rows_stored
    # The query helpers read the one table of each session as they read per-symbol ones.
    from ticktensor.store import table_dataset

    per_symbol = table_dataset(v, "trades").to_table(
        filter=pc.field("symbol") == "BBB", columns=["ts_event"]
    )
    expected = sum(_events("BBB", d, EventKind.TRADES).num_rows for d in range(2))
    assert per_symbol.num_rows == expected
    Store.open(str(tmp_path / "store")).verify()


def test_each_symbols_pack_rows_equal_its_features_computed_alone(tmp_path: Path) -> None:
    """The slow reference: compute_features on one symbol's events of one session."""
    spec = FeatureSpec(
        ("log_return", "spread_bps", "imbalance", "volatility_5", "signed_volume_1s",
         "trade_count_3", "vwap_distance_2", "last_trade_signed_size", "time_of_day"),
        (
            LabelSpec("y", "mid", horizon_rows=4),
            LabelSpec("z", "mid", "forward_value", horizon_ns=2 * 10**9),
        ),
    )  # fmt: skip
    result = ingest(
        market_files(tmp_path), str(tmp_path / "store"), opts(spec=spec), progress=False
    )
    v = result.version
    for day, session in enumerate(SESSIONS):
        for symbol in MARKET.symbols:
            alone = compute_features({kind: _events(symbol, day, kind) for kind in COLUMNS}, spec)
            ts, values, labels = _pack_rows(v, session, symbol)
            np.testing.assert_array_equal(ts, alone.ts)
            np.testing.assert_array_equal(values, alone.values)
            np.testing.assert_array_equal(labels, alone.labels)


def _files_of(store: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(store)): p.read_bytes()
        for p in store.rglob("*")
        if p.is_file() and p.name != ".lock"
    }


def test_a_rerun_writes_nothing_and_publishes_no_version(tmp_path: Path) -> None:
    files = market_files(tmp_path)
    store = tmp_path / "store"
    first = ingest(files, str(store), opts(), progress=False)
    before = _files_of(store)
    again = ingest(files, str(store), opts(workers=1), progress=False)
    assert not again.published
    assert again.version.version == first.version.version
    assert _files_of(store) == before  # not one file added or rewritten
    assert (again.packs, again.series) == (2, 8)


def test_quarantine_stays_per_input_file(tmp_path: Path) -> None:
    """Bad rows of several symbols and sessions, and one file repeating another's rows:
    one quarantine table per file, as before, and every row accounted for."""
    files = market_files(tmp_path)
    bad = tmp_path / "trades-bad.csv"
    copy = Path(files[1]).read_text().splitlines()  # AAA's trades of day 0
    t0, t1 = (_events("BBB", d, EventKind.TRADES).column("ts_event") for d in range(2))
    lines = [
        copy[0],
        copy[1],  # a duplicate of trades-AAA-0.csv's first trade
        f"{t0[0].value},BBB,-1.0,5,1",  # negative price, session 0
        f"{t1[0].value},CCC,10.0,-5,1",  # negative size, session 1
        f"{t1[1].value},DDD,10.0,5,1",  # a good row of session 1
    ]
    bad.write_text("\n".join(lines) + "\n")
    result = ingest([*files, str(bad)], str(tmp_path / "store"), opts(), progress=False)
    for f in result.files:
        assert f.rows_read == f.rows_stored + f.rows_quarantined
    (report,) = [f for f in result.files if f.file == str(bad)]
    assert (report.rows_read, report.rows_stored, report.rows_quarantined) == (4, 1, 3)
    assert report.rules == {"duplicate": 1, "positive_price": 1, "non_negative_size": 1}
    (q,) = result.version.tables_of("quarantine")
    assert q.symbol == "trades-bad.csv"
    table = result.version.read_table(q)
    assert table.column("row").to_pylist() == [1, 2, 3]
    assert table.column("rule").to_pylist() == ["duplicate", "positive_price", "non_negative_size"]


def test_unsorted_overlapping_files_are_sorted_by_symbol_then_time(tmp_path: Path) -> None:
    t = 1_704_205_800_000_000_000
    a = tmp_path / "a.csv"
    b = tmp_path / "b.csv"
    header = "ts_event,symbol,price,size,side\n"
    a.write_text(header + f"{t + 3},BBB,1,1,1\n{t + 1},AAA,1,1,1\n{t + 2},BBB,1,2,1\n")
    b.write_text(header + f"{t + 2},BBB,1,3,1\n{t},AAA,1,1,1\n{t + 1},AAA,1,1,1\n")
    options = opts(read=ReadOptions(kind=EventKind.TRADES))
    result = ingest([str(a), str(b)], str(tmp_path / "store"), options, progress=False)
    (record,) = result.version.tables_of("trades")
    table = result.version.read_table(record)
    got = list(
        zip(
            table.column("symbol").to_pylist(),
            table.column("ts_event").cast(pa.int64()).to_pylist(),
            table.column("size").to_pylist(),
            strict=True,
        )
    )
    # b's copy of AAA at t + 1 is a duplicate of a's; equal times keep file order.
    assert got == [
        ("AAA", t, 1.0),
        ("AAA", t + 1, 1.0),
        ("BBB", t + 2, 2.0),
        ("BBB", t + 2, 3.0),
        ("BBB", t + 3, 1.0),
    ]
    assert {f.file: f.rules for f in result.files} == {str(a): {}, str(b): {"duplicate": 1}}


def test_notes_name_each_symbol_without_features(tmp_path: Path) -> None:
    """Per symbol, as when every (symbol, session) was a task of its own."""
    t = 1_704_205_800_000_000_000
    trades = tmp_path / "trades.csv"
    trades.write_text(
        "ts_event,symbol,price,size,side\n"
        + "".join(f"{t + i * 10**9},AAA,{10 + i},{5 + i},1\n" for i in range(30))
        + f"{t},BBB,10,1,1\n"  # too little volume for one bar
    )
    quotes = tmp_path / "quotes.csv"
    quotes.write_text(f"ts_event,symbol,bid_px,ask_px,bid_sz,ask_sz\n{t},ZZZ,9,10,1,1\n")
    spec = FeatureSpec(("close", "volume"), clock="bars", bar="volume:20")
    result = ingest(
        [str(trades), str(quotes)], str(tmp_path / "s"), opts(spec=spec), progress=False
    )
    session = "2024-01-02"
    assert result.notes == [
        f"BBB/{session}: no rows on the bars clock",
        f"ZZZ/{session}: events stored, no features (the bars clock needs trades events)",
    ]
    (pack,) = result.version.packs
    assert result.version.pack_index(pack).symbols == ("AAA",)


# Sessions an older ticktensor stored as one segment per symbol.


def _older_store(tmp_path: Path, files: list[str]) -> tuple[str, StoreVersion]:
    """The store an older ticktensor made of ``files``: one segment and one table per
    (symbol, session); built from this job's own output, split by symbol."""
    packed = tmp_path / "packed"
    ingest(files, str(packed), opts(), progress=False)
    source = Store.open(str(packed)).version()
    old = Store.create(str(tmp_path / "old"))
    segments, tables = [], []
    for pack in source.packs:
        index, data = source.pack_index(pack), source.read_pack(pack)
        assert data.labels is not None
        for symbol in index.symbols:
            lo, hi = index.rows_of(symbol)
            segments.append(
                write_segment(
                    old,
                    symbol=symbol,
                    session=pack.session,
                    ts=data.ts[lo:hi],
                    values=data.values[lo:hi],
                    labels=data.labels[lo:hi],
                    feature_names=pack.feature_names,
                    label_names=pack.label_names,
                )
            )
    for record in source.tables:
        table = source.read_table(record)
        for symbol in sorted(set(table.column("symbol").to_pylist())):
            rows = table.filter(pc.field("symbol") == symbol)
            tables.append(
                old.write_table(kind=record.kind, symbol=symbol, session=record.session, table=rows)
            )
    spec = source.manifest.attributes
    version = old.commit(segments=segments, tables=tables, attributes=spec)
    shutil.rmtree(packed)
    return str(tmp_path / "old"), version


def test_a_session_stored_as_segments_needs_replace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = market_files(tmp_path)
    day0 = [f for f in files if f.endswith("-0.csv")]
    url, old = _older_store(tmp_path, day0)
    with pytest.raises(VersionConflictError) as info:
        ingest(day0, url, opts(), progress=False)
    message = str(info.value)
    assert f"session {SESSIONS[0]} is stored as one segment per symbol" in message
    assert message.endswith("pass replace=True to supersede it")
    assert Store.open(url).latest_version() == old.version  # refused before any commit
    # The command line names its flag.
    argv = ["ingest", *day0, "--out", url, "--format", "csv", "--quiet", "--workers", "1"]
    assert main(argv) == 1
    assert "pass --replace to supersede it" in capsys.readouterr().err

    replaced = ingest(files, url, opts(replace=True), progress=False)
    v = replaced.version
    assert v.version == old.version + 1
    assert v.segments == ()  # the pack took the place of the session's segments
    assert [p.session for p in v.packs] == SESSIONS
    for symbol in MARKET.symbols:  # the same rows, now in the pack
        seg = old.read_segment(old.segment(symbol, SESSIONS[0]))
        ts, values, _ = _pack_rows(v, SESSIONS[0], symbol)
        np.testing.assert_array_equal(ts, seg.ts)
        np.testing.assert_array_equal(values, seg.values)
    again = ingest(files, url, opts(), progress=False)  # idempotent from here on
    assert not again.published


def test_replacing_a_session_of_segments_drops_its_per_symbol_tables(tmp_path: Path) -> None:
    files = [f for f in market_files(tmp_path) if f.endswith("-0.csv")]
    url, _ = _older_store(tmp_path, files)
    v = ingest(files, url, opts(replace=True), progress=False).version
    assert [(t.symbol, t.session) for t in v.tables_of("trades")] == [("*", SESSIONS[0])]


@pytest.mark.parametrize("workers", [1, 2])
def test_blocks_of_symbols_change_nothing_in_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """A session merged and computed a few symbols at a time (on threads) writes the same
    files as in one piece, a block without any trades included."""
    import ticktensor.ingest._job as job

    files = market_files(tmp_path)
    # DDD has no trades on day 1: with small blocks, a block holds no trades at all.
    files = [f for f in files if not f.endswith("trades-DDD-1.csv")]
    whole = ingest(files, str(tmp_path / "whole"), opts(workers=workers), progress=False)
    monkeypatch.setattr(job, "BLOCK_ROWS", 300)  # one symbol (~800 rows) per block
    blocks = ingest(files, str(tmp_path / "blocks"), opts(workers=workers), progress=False)
    assert [p.path for p in blocks.version.packs] == [p.path for p in whole.version.packs]
    assert [t.path for t in blocks.version.tables] == [t.path for t in whole.version.tables]
    assert blocks.notes == whole.notes
    assert (blocks.packs, blocks.series) == (whole.packs, whole.series) == (2, 8)


# A job with rows of some symbols of a session the store holds: those symbols' rows take
# the place of theirs, every other symbol keeps its stored rows.


def symbol_files(tmp: Path, symbol: str, day: int = 0, *, price_shift: float = 0.0) -> list[str]:
    """One symbol's quotes and trades of one day, a file each (a vendor's per-symbol
    files); ``price_shift`` moves its trade prices (other data for the same day)."""
    folder = tmp / f"shift-{price_shift}"
    folder.mkdir(exist_ok=True)
    trades = _events(symbol, day, EventKind.TRADES).select(COLUMNS[EventKind.TRADES])
    price = pc.add(trades.column("price"), price_shift)
    trades = trades.set_column(trades.schema.get_field_index("price"), "price", price)
    quotes = _events(symbol, day, EventKind.QUOTES).select(COLUMNS[EventKind.QUOTES])
    return [
        _csv(quotes, folder / f"quotes-{symbol}-{day}.csv"),
        _csv(trades, folder / f"trades-{symbol}-{day}.csv"),
    ]


def _symbol_rows(version: StoreVersion, session: str) -> dict[str, tuple[object, ...]]:
    """Per symbol of a session: its rows of each kind and its feature rows, as stored."""
    out: dict[str, tuple[object, ...]] = {}
    tables = {t.kind: version.read_table(t) for t in version.tables if t.session == session}
    pack = version.pack(session)
    data = version.read_pack(pack)
    for symbol in version.pack_index(pack).symbols:
        lo, hi = version.pack_index(pack).rows_of(symbol)
        events = tuple(
            tables[kind].filter(pc.field("symbol") == symbol) for kind in ("quotes", "trades")
        )
        assert data.labels is not None
        out[symbol] = (*events, data.ts[lo:hi], data.values[lo:hi], data.labels[lo:hi])
    return out


def _assert_same_rows(got: tuple[object, ...], want: tuple[object, ...]) -> None:
    """Bit for bit: the tables equal, the arrays' bytes equal."""
    for a, b in zip(got, want, strict=True):
        if isinstance(a, pa.Table):
            assert isinstance(b, pa.Table)
            assert a.equals(b)
        else:
            assert isinstance(a, np.ndarray)
            assert isinstance(b, np.ndarray)
            assert a.dtype == b.dtype
            assert a.tobytes() == b.tobytes()


def test_one_symbol_per_run_adds_up_to_one_run_over_every_file(tmp_path: Path) -> None:
    """Per-symbol files of one day arriving in separate runs: each run adds its symbol to
    the session; the version equals one run over every file, statistics included."""
    period = (0, 2**62)  # every feature row counts towards the statistics
    files = {s: symbol_files(tmp_path, s) for s in ("AAA", "BBB", "CCC")}
    files["BBB"] += symbol_files(tmp_path, "BBB", 1)  # a session the later runs leave alone
    url = str(tmp_path / "runs")
    for symbol in ("BBB", "AAA", "CCC"):  # not in symbol order
        result = ingest(files[symbol], url, opts(stats_period=period), progress=False)
        assert result.published
    every = [f for fs in files.values() for f in fs]
    whole = ingest(every, str(tmp_path / "whole"), opts(stats_period=period), progress=False)
    v, w = result.version, whole.version
    assert v.version == 3
    assert (result.packs, result.series) == (1, 3)  # the session's pack holds all three
    assert [p.session for p in v.packs] == SESSIONS
    assert v.symbols == w.symbols == ("AAA", "BBB", "CCC")
    assert [(t.kind, t.symbol) for t in v.tables_of("trades")] == [("trades", "*")] * 2
    got, want = _symbol_rows(v, SESSIONS[0]), _symbol_rows(w, SESSIONS[0])
    assert list(got) == list(want)
    for symbol in want:
        _assert_same_rows(got[symbol], want[symbol])
    # The same files: each table of every symbol and the pack, byte for byte.
    assert [t.path for t in v.tables] == [t.path for t in w.tables]
    assert [p.path for p in v.packs] == [p.path for p in w.packs]
    # Each feature row counts once towards the statistics, stored or new.
    assert v.stats is not None
    assert v.stats.count == sum(p.rows for p in v.packs)
    assert v.stats == w.stats
    Store.open(url).verify()


def test_replace_of_one_symbol_keeps_the_others_bit_for_bit(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    first = ingest(market_files(tmp_path), url, opts(), progress=False).version
    other = symbol_files(tmp_path, "BBB", price_shift=0.5)
    v = ingest(other, url, opts(replace=True), progress=False).version
    assert v.version == first.version + 1
    before, after = _symbol_rows(first, SESSIONS[0]), _symbol_rows(v, SESSIONS[0])
    assert list(after) == list(MARKET.symbols)
    for symbol in ("AAA", "CCC", "DDD"):
        _assert_same_rows(after[symbol], before[symbol])
    # BBB's rows are the new file's, as a run over it alone computes them.
    alone = ingest(other, str(tmp_path / "alone"), opts(), progress=False).version
    _assert_same_rows(after["BBB"], _symbol_rows(alone, SESSIONS[0])["BBB"])
    assert after["BBB"][1] != before["BBB"][1]  # its trades changed
    # The other session is untouched: the same pack and tables.
    assert v.pack(SESSIONS[1]) == first.pack(SESSIONS[1])
    assert [t for t in v.tables if t.session == SESSIONS[1]] == [
        t for t in first.tables if t.session == SESSIONS[1]
    ]


def test_other_rows_of_a_stored_symbol_conflict_naming_it(tmp_path: Path) -> None:
    url = tmp_path / "store"
    files = [*symbol_files(tmp_path, "AAA"), *symbol_files(tmp_path, "BBB")]
    first = ingest(files, str(url), opts(), progress=False).version
    data = {p: b for p, b in _files_of(url).items() if p.startswith(("events/", "packs/"))}
    other = symbol_files(tmp_path, "BBB", price_shift=0.5)
    with pytest.raises(VersionConflictError) as info:
        ingest(other, str(url), opts(), progress=False)
    message = str(info.value)
    assert message.startswith(f"session {SESSIONS[0]} already exists in version {first.version}")
    assert "(its trades events differ), for symbol BBB;" in message
    assert message.endswith("pass replace=True to supersede it")
    assert Store.open(str(url)).latest_version() == first.version
    after = {p: b for p, b in _files_of(url).items() if p.startswith(("events/", "packs/"))}
    assert after == data  # refused before writing a table or a pack
    # A new symbol beside them is no conflict.
    added = ingest(symbol_files(tmp_path, "CCC"), str(url), opts(), progress=False)
    assert added.version.symbols == ("AAA", "BBB", "CCC")


def test_an_older_stores_session_takes_one_symbol_in_and_folds_its_tables(
    tmp_path: Path,
) -> None:
    """Segments and per-symbol tables (what an older ticktensor wrote), then one symbol's
    files with replace: one pack and one table per kind of every symbol, nothing lost."""
    files = [f for f in market_files(tmp_path) if f.endswith("-0.csv")]
    url, old = _older_store(tmp_path, files)
    other = symbol_files(tmp_path, "CCC", price_shift=0.5)
    v = ingest(other, url, opts(replace=True), progress=False).version
    assert v.segments == ()
    assert v.pack_index(v.pack(SESSIONS[0])).symbols == MARKET.symbols
    assert [(t.kind, t.symbol) for t in v.tables] == [("quotes", "*"), ("trades", "*")]
    rows = _symbol_rows(v, SESSIONS[0])
    for symbol in ("AAA", "BBB", "DDD"):  # as the segments and per-symbol tables held them
        seg = old.read_segment(old.segment(symbol, SESSIONS[0]))
        assert seg.labels is not None
        tables = tuple(
            old.read_table(next(t for t in old.tables_of(kind) if t.symbol == symbol))
            for kind in ("quotes", "trades")
        )
        _assert_same_rows(rows[symbol], (*tables, seg.ts, seg.values, seg.labels))
    alone = ingest(other, str(tmp_path / "alone"), opts(), progress=False).version
    _assert_same_rows(rows["CCC"], _symbol_rows(alone, SESSIONS[0])["CCC"])
    assert sum(t.rows for t in v.tables) == sum(t.rows for t in old.tables)
    Store.open(url).verify()


def test_an_identical_rerun_of_some_symbols_writes_nothing(tmp_path: Path) -> None:
    url = tmp_path / "store"
    per_symbol = {s: symbol_files(tmp_path, s) for s in MARKET.symbols}
    first = ingest([f for fs in per_symbol.values() for f in fs], str(url), opts(), progress=False)
    before = _files_of(url)
    for symbol in ("BBB", "DDD"):
        again = ingest(per_symbol[symbol], str(url), opts(), progress=False)
        assert not again.published
        assert again.version.version == first.version.version
        assert (again.packs, again.series) == (1, 4)
        again = ingest(per_symbol[symbol], str(url), opts(replace=True), progress=False)
        assert not again.published
    assert _files_of(url) == before
