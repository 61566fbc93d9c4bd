"""Vendor text layouts read as users expect: exact bar lengths, time-column spellings, file
names that carry the symbol, extra columns named, wrong schemas and delimiters refused
with the flag that fixes them, and size-0 trades quarantined by a rule."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ticktensor.errors import ConfigError, SchemaError
from ticktensor.ingest._job import IngestOptions, ingest
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import CsvFormat, CsvReader, EventBatch, ReadOptions
from ticktensor.schemas import EventKind

T0_MS = 1_704_067_200_000  # 2024-01-01 00:00 UTC


def read(path: Path, **options: Any) -> list[EventBatch]:
    return list(CsvReader().read(expand_inputs([str(path)])[0], ReadOptions(**options)))


def notes(batches: list[EventBatch]) -> tuple[str, ...]:
    return next(b.inference.notes for b in batches if b.inference is not None)


def run(paths: list[Path], tmp_path: Path, **read: Any) -> Any:
    options = IngestOptions(read=ReadOptions(**read), workers=1)
    result = ingest([str(p) for p in paths], str(tmp_path / "store"), options, progress=False)
    for f in result.files:  # nothing lost, for every input
        assert f.rows_read == f.rows_stored + f.rows_quarantined
    return result


@pytest.mark.parametrize("interval_ms", [1, 250, 1_000, 60_000, 3_600_000, 86_400_000], ids=str)
def test_bar_length_and_phase_are_exact_integer_ns(tmp_path: Path, interval_ms: int) -> None:
    path = tmp_path / "bars.csv"
    start = T0_MS + 7  # an odd phase: bars open 7 ms past the grid
    lines = [f"{start + i * interval_ms},1.0,2.0,0.5,1.5,10" for i in range(135)]
    path.write_text("timestamp,open,high,low,close,volume\n" + "\n".join(lines) + "\n")
    batches = read(path, kind="ohlcv", symbol="X")
    table = pa.concat_tables([b.table for b in batches])
    assert sum(b.rejects.num_rows for b in batches) == 0
    assert table.num_rows == 135
    assert set(table.column("interval_ns").to_pylist()) == {interval_ms * 10**6}
    ts = table.column("ts_event").cast(pa.int64()).to_pylist()
    assert ts == [(start + i * interval_ms) * 10**6 for i in range(135)]


def test_size_zero_trades_are_quarantined_by_a_rule(tmp_path: Path) -> None:
    path = tmp_path / "trades.csv"
    rows = [f"{T0_MS + i},AAA,100.5,{0 if i == 3 else 5}" for i in range(10)]
    path.write_text("timestamp,symbol,price,size\n" + "\n".join(rows) + "\n")
    [report] = run([path], tmp_path, kind="trades").files
    assert (report.rows_read, report.rows_stored, report.rows_quarantined) == (10, 9, 1)
    assert report.rules == {"positive_trade_size": 1}


@pytest.mark.parametrize("header", ["Gmt time", "Time (UTC)", "Date (GMT)", "GMT Time"])
def test_dukascopy_and_similar_time_headers(tmp_path: Path, header: str) -> None:
    path = tmp_path / "EURUSD_Candlestick_1_M_BID_01.01.2024-02.01.2024.csv"
    lines = [f"01.01.2024 00:0{i}:00.000,1.1,1.2,1.0,1.15,100.5" for i in range(5)]
    path.write_text(f"{header},Open,High,Low,Close,Volume\n" + "\n".join(lines) + "\n")
    batches = read(path, kind="ohlcv", symbol="EURUSD")
    [batch] = batches
    assert batch.inference is not None
    assert batch.inference.columns["ts_event"] == header
    assert batch.table.num_rows == 5
    assert batch.rejects.num_rows == 0


def test_symbol_and_venue_from_an_unambiguous_file_name(tmp_path: Path) -> None:
    path = tmp_path / "6EH4.XCME_1min_bars_20240102.csv.gz"
    lines = [f"2024-01-02T14:3{i}:00Z,1.1,1.2,1.0,1.15,7" for i in range(5)]
    with gzip.open(path, "wt") as f:
        f.write("timestamp,open,high,low,close,volume\n" + "\n".join(lines) + "\n")
    batches = read(path, kind="ohlcv")
    table = pa.concat_tables([b.table for b in batches])
    assert set(table.column("symbol").to_pylist()) == {"6EH4"}
    assert set(table.column("venue").to_pylist()) == {"XCME"}
    assert any("from the file name" in n and "6EH4" in n for n in notes(batches))
    # The job takes it too, and says so.
    [report] = run([path], tmp_path).files
    assert report.rows_stored == 5
    assert any("6EH4" in n for n in report.inference["notes"])


def test_a_name_without_vendor_naming_still_needs_a_symbol(tmp_path: Path) -> None:
    path = tmp_path / "bars_1min.csv"
    path.write_text("timestamp,open,high,low,close\n2024-01-02T14:30:00Z,1,2,0.5,1.5\n")
    with pytest.raises(SchemaError, match="--symbol"):
        read(path, kind="ohlcv")


def test_extra_columns_are_listed_as_not_stored(tmp_path: Path) -> None:
    path = tmp_path / "AAPL.csv"  # Yahoo's daily layout
    lines = [f"2024-01-0{i + 2},180,182,179,181,180.5,1000" for i in range(5)]
    path.write_text("Date,Open,High,Low,Close,Adj Close,Volume\n" + "\n".join(lines) + "\n")
    batches = read(path, kind="ohlcv", symbol="AAPL")
    assert any("not stored" in n and "'Adj Close'" in n for n in notes(batches))
    assert pa.concat_tables([b.table for b in batches]).num_rows == 5


def test_schema_quotes_is_refused_without_bid_and_ask_columns(tmp_path: Path) -> None:
    path = tmp_path / "trades.csv"
    path.write_text("timestamp,symbol,price,size\n1704067200000,AAA,100.5,3\n")
    with pytest.raises(SchemaError, match=r"quotes.*bid_px.*ask_px.*\['timestamp'"):
        read(path, kind="quotes")


def test_book_update_columns_are_never_read_as_trades(tmp_path: Path) -> None:
    path = tmp_path / "depth.csv"
    path.write_text(
        "symbol,timestamp,first_update_id,last_update_id,side,update_type,price,qty,pu\n"
        "BTCUSDT,1704067200000,1,1,b,snap,42000.5,1.5,0\n"
    )
    from ticktensor.ingest._job import infer_csv_kind

    with pytest.raises(ConfigError, match="order-book updates"):
        infer_csv_kind(expand_inputs([str(path)])[0], ReadOptions())


def test_pipe_delimited_headerless_file_points_at_delimiter_and_no_header(
    tmp_path: Path,
) -> None:
    path = tmp_path / "klines.csv"
    lines = [
        f"{T0_MS + i * 60_000}|42000|42010|41990|42005|1.5|{T0_MS + i * 60_000 + 59_999}|63000|12|"
        "0.7|29400|0"
        for i in range(3)
    ]
    path.write_text("\n".join(lines) + "\n")
    from ticktensor.ingest._job import infer_csv_kind

    with pytest.raises(ConfigError, match=r"--delimiter '\|' --no-header"):
        infer_csv_kind(expand_inputs([str(path)])[0], ReadOptions())
    with pytest.raises(SchemaError, match=r"--delimiter '\|'"):
        read(path, kind="ohlcv", symbol="X", csv=CsvFormat(header=False))


def test_binance_dump_honours_the_delimiter_and_names_it(tmp_path: Path) -> None:
    from ticktensor.ingest.readers.binance import BinanceReader

    path = tmp_path / "BTCUSDT-1m-2024-01-01.csv"
    lines = [
        f"{T0_MS + i * 60_000}|42000|42010|41990|42005|1.5|{T0_MS + i * 60_000 + 59_999}|63000|12|"
        "0.7|29400|0"
        for i in range(3)
    ]
    path.write_text("\n".join(lines) + "\n")
    source = expand_inputs([str(path)])[0]
    with pytest.raises(ConfigError, match=r"--delimiter '\|'"):
        list(BinanceReader().read(source, ReadOptions()))
    options = ReadOptions(csv=CsvFormat(delimiter="|"))
    batches = list(BinanceReader().read(source, options))
    table = pa.concat_tables([b.table for b in batches])
    assert table.num_rows == 3
    assert sum(b.rejects.num_rows for b in batches) == 0
    assert table.column("close").to_pylist() == [42005.0] * 3
    assert batches[0].kind is EventKind.OHLCV


DATA = Path(__file__).parents[4] / "shared" / "data"
if not DATA.exists():
    DATA = Path(__file__).resolve().parents[3].parent.joinpath("shared/data")
LOBSTER = DATA / "lobster" / "AMZN_2012-06-21_34200000_57600000_{part}_1.csv"


@pytest.mark.parametrize("quotes", [False, True], ids=["mbo", "quotes"])
def test_lobster_in_another_delimiter_is_named_and_read_with_it(
    tmp_path: Path, quotes: bool
) -> None:
    from ticktensor.ingest.readers.lobster import LobsterReader

    for part in ("message", "orderbook"):
        lines = Path(str(LOBSTER).format(part=part)).read_text().splitlines()[:51]
        target = tmp_path / Path(str(LOBSTER).format(part=part)).name
        target.write_text("\n".join(line.replace(",", ";") for line in lines) + "\n")
    source = expand_inputs([str(tmp_path / Path(str(LOBSTER).format(part="message")).name)])[0]
    kind = "quotes" if quotes else None
    wrong = list(LobsterReader().read(source, ReadOptions(kind=kind)))
    rejects = pa.concat_tables([b.rejects for b in wrong])
    assert rejects.column("rule")[0].as_py() == "field_count"
    assert "--delimiter ';'" in rejects.column("message")[0].as_py()
    right = list(LobsterReader().read(source, ReadOptions(kind=kind, csv=CsvFormat(delimiter=";"))))
    assert sum(b.table.num_rows for b in right) == 50
    assert sum(b.rejects.num_rows for b in right) == 0
    reference = list(
        LobsterReader().read(
            expand_inputs([str(LOBSTER).format(part="message")])[0],
            ReadOptions(kind=kind, batch_rows=50),
        )
    )
    first = pa.concat_tables([b.table for b in right])
    assert first.equals(reference[0].table.slice(0, 50))


def test_tardis_header_in_another_delimiter_is_named(tmp_path: Path) -> None:
    from ticktensor.ingest.readers.tardis import TardisReader

    lines = (DATA / "tardis" / "bitmex_trades_XBTUSD.csv").read_text().splitlines()
    path = tmp_path / "bitmex_trades.csv"
    path.write_text("\n".join(line.replace(",", "|") for line in lines) + "\n")
    with pytest.raises(ConfigError, match=r"--delimiter '\|'"):
        list(TardisReader().read(expand_inputs([str(path)])[0], ReadOptions()))


BARS = DATA / "bars" / "btc-perp-20211231-20220201_1m.csv"


@pytest.mark.parametrize(
    ("header", "delimiter", "extra"),
    [
        ("Gmt time,Open,High,Low,Close,Volume", ";", False),  # Dukascopy-style header
        ("Date (GMT),Open,High,Low,Close,Volume", "\t", False),
        ("timestamp,open,high,low,close,volume", "|", True),  # a column no schema takes
        (None, "|", False),  # no header at all
    ],
    ids=["gmt-semicolon", "date-gmt-tab", "extra-pipe", "headerless-pipe"],
)
def test_real_bars_in_header_and_delimiter_variants(
    tmp_path: Path, header: str | None, delimiter: str, extra: bool
) -> None:
    import pyarrow.csv as pacsv

    original = pacsv.read_csv(BARS).slice(0, 600)
    lines = BARS.read_text().splitlines()[1:601]
    fields = [line.split(",") + (["1.0"] if extra else []) for line in lines]
    names = header.split(",") + (["Adj Close"] if extra else []) if header else None
    text = [delimiter.join(names)] if names else []
    text += [delimiter.join(f) for f in fields]
    path = tmp_path / "btc-bars.csv"
    path.write_text("\n".join(text) + "\n")
    columns = {} if header else {c: str(i) for i, c in enumerate(original.column_names)}
    columns.pop("timestamp", None)
    if not header:
        columns["ts_event"] = "0"
    fmt = CsvFormat(delimiter=delimiter, header=header is not None, columns=columns)
    batches = read(path, kind="ohlcv", symbol="BTC", csv=fmt, batch_rows=250)
    table = pa.concat_tables([b.table for b in batches])
    assert sum(b.rejects.num_rows for b in batches) == 0
    assert table.column("close").to_pylist() == original.column("close").to_pylist()
    assert table.column("volume").to_pylist() == original.column("volume").to_pylist()
    assert set(table.column("interval_ns").to_pylist()) == {60 * 10**9}
    if extra:
        assert any("'Adj Close'" in n for n in notes(batches))
    [report] = run([path], tmp_path, kind="ohlcv", symbol="BTC", csv=fmt).files
    assert (report.rows_read, report.rows_stored, report.rows_quarantined) == (600, 600, 0)
