"""Generic CSV/Parquet files read without a column mapping: names, time units and layouts."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ticktensor.errors import SchemaError
from ticktensor.ingest._job import IngestOptions, ingest
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import (
    CsvFormat,
    CsvReader,
    EventBatch,
    ParquetReader,
    ReadOptions,
    kind_from_columns,
)
from ticktensor.ingest.readers._names import normalize

DATA = Path(__file__).parents[4] / "shared" / "data"
if not DATA.exists():
    DATA = Path(__file__).resolve().parents[3].parent.joinpath("shared/data")
USDJPY = DATA / "fx" / "usdjpy-ticks.csv"
BARS = DATA / "bars" / "btc-perp-20211231-20220201_1m.csv"


def read(path: Path, **options: object) -> list[EventBatch]:
    reader = ParquetReader() if path.suffix == ".parquet" else CsvReader()
    return list(reader.read(expand_inputs([str(path)])[0], ReadOptions(**options)))  # type: ignore[arg-type]


def table_of(batches: list[EventBatch]) -> pa.Table:
    return pa.concat_tables([b.table for b in batches])


def ns(text: str) -> int:
    dt = datetime.fromisoformat(text)
    dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    return int(dt.timestamp()) * 10**9 + dt.microsecond * 1000


def test_real_fx_ticks_need_no_mapping() -> None:
    batches = read(USDJPY, kind="quotes", symbol="USD/JPY")
    table = table_of(batches)
    with USDJPY.open() as f:
        expected = list(csv.DictReader(f))
    assert table.num_rows == len(expected) == 1000
    assert table.column("ts_event").cast(pa.int64()).to_pylist() == [
        ns(r["timestamp"]) for r in expected
    ]
    assert table.column("bid_px").to_pylist() == [float(r["bid"]) for r in expected]
    assert table.column("ask_px").to_pylist() == [float(r["ask"]) for r in expected]
    inference = batches[0].inference
    assert inference is not None
    assert dict(inference.columns) == {"ts_event": "timestamp", "bid_px": "bid", "ask_px": "ask"}
    assert "ts_event: ISO 8601 text with a UTC offset" in inference.notes
    assert all(b.inference is None for b in batches[1:])


@pytest.mark.parametrize(
    "header",
    [
        ("ts_event", "bid_px", "ask_px"),
        ("Time", "Bid Price", "Ask Price"),
        ("datetime", "best_bid", "best_ask"),
        ("timestamp_utc", "bidPrice", "askPrice"),
        ("<DATETIME>", "<BID>", "<OFFER>"),
        ("TIMESTAMP", "BID", "ASK"),
    ],
)
def test_header_spellings_give_the_same_quotes(tmp_path: Path, header: tuple[str, ...]) -> None:
    path = tmp_path / "q.csv"
    rows = ["2024-01-02T10:00:00Z,1.1,1.2", "2024-01-02T10:00:01.5Z,1.15,1.25"]
    path.write_text(",".join(header) + "\n" + "\n".join(rows) + "\n")
    assert kind_from_columns(list(header), {}) == "quotes"
    table = table_of(read(path, kind="quotes", symbol="X"))
    start = ns("2024-01-02T10:00:00+00:00")
    assert table.column("ts_event").cast(pa.int64()).to_pylist() == [start, start + 1_500_000_000]
    assert table.column("bid_px").to_pylist() == [1.1, 1.15]
    assert table.column("ask_px").to_pylist() == [1.2, 1.25]


@pytest.mark.parametrize(("unit", "scale"), [("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)])
def test_epoch_unit_from_magnitude(tmp_path: Path, unit: str, scale: int) -> None:
    seconds = 1_723_161_600  # 2024-08-09
    path = tmp_path / "t.csv"
    path.write_text(f"time,price,qty\n{seconds * scale},10.5,2\n{(seconds + 1) * scale},11,3\n")
    batches = read(path, kind="trades", symbol="X")
    got = table_of(batches).column("ts_event").cast(pa.int64()).to_pylist()
    assert got == [seconds * 10**9, (seconds + 1) * 10**9]
    assert batches[0].inference is not None
    assert f"ts_event: {unit} since the epoch (from the magnitude)" in batches[0].inference.notes
    explicit = read(path, kind="trades", symbol="X", csv=CsvFormat(ts_unit="ns"))
    assert table_of(explicit).column("ts_event").cast(pa.int64()).to_pylist()[0] == seconds * scale


def test_decimal_epoch_seconds_are_exact(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("timestamp,price,size\n1700000000.123456789,1,1\n1700000001,2,1\n")
    table = table_of(read(path, kind="trades", symbol="X"))
    got = table.column("ts_event").cast(pa.int64()).to_pylist()
    assert got == [1_700_000_000_123_456_789, 1_700_000_001_000_000_000]


@pytest.mark.parametrize(
    ("header", "first", "second"),
    [
        ("timestamp,open,high,low,close,volume", "2024-01-02 10:00:00", "2024-01-02 10:01:00"),
        ("timestamp_utc,open,high,low,close,volume", "1704189600000", "1704189660000"),
        ("Date,Time,O,H,L,C,V", "2024.01.02,10:00", "2024.01.02,10:01"),
        ("<DATE>,<TIME>,<OPEN>,<HIGH>,<LOW>,<CLOSE>,<VOL>", "20240102,100000", "20240102,100100"),
        (
            "datetime,open,high,low,close,volume",
            "02.01.2024 10:00:00.000",
            "02.01.2024 10:01:00.000",
        ),
    ],
)
def test_bar_headers_and_time_layouts(tmp_path: Path, header: str, first: str, second: str) -> None:
    path = tmp_path / "bars.csv"
    path.write_text(f"{header}\n{first},1,3,0.5,2,10\n{second},2,4,1.5,3,20\n")
    assert kind_from_columns(header.split(","), {}) == "ohlcv"
    batches = read(path, kind="ohlcv", symbol="X")
    table = table_of(batches)
    start = ns("2024-01-02T10:00:00+00:00")
    assert table.column("ts_event").cast(pa.int64()).to_pylist() == [start, start + 60 * 10**9]
    assert table.column("close").to_pylist() == [2.0, 3.0]
    assert table.column("volume").to_pylist() == [10.0, 20.0]
    assert table.column("interval_ns").to_pylist() == [60 * 10**9] * 2


def test_ambiguous_names_fail_with_the_candidates_and_columns_settles_it(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    path.write_text("timestamp,time,bid,ask\n1704189600000,1704189600001,1.1,1.2\n")
    with pytest.raises(SchemaError, match=r"'ts_event'.*\['timestamp', 'time'\].*--columns"):
        read(path, kind="quotes", symbol="X")
    fmt = CsvFormat(columns={"ts_event": "time"})
    table = table_of(read(path, kind="quotes", symbol="X", csv=fmt))
    assert table.column("ts_event").cast(pa.int64()).to_pylist() == [1_704_189_600_001_000_000]


def test_mapping_overrides_inference(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("ts,price,qty,amount\n1704189600000,10,1,99\n")
    with pytest.raises(SchemaError, match=r"'size'.*\['qty', 'amount'\]"):
        read(path, kind="trades", symbol="X")
    table = table_of(
        read(path, kind="trades", symbol="X", csv=CsvFormat(columns={"size": "amount"}))
    )
    assert table.column("size").to_pylist() == [99.0]


def test_parquet_columns_and_units_are_inferred(tmp_path: Path) -> None:
    path = tmp_path / "q.parquet"
    ms = np.array([1_704_189_600_000, 1_704_189_600_250], dtype=np.int64)
    pq.write_table(pa.table({"Timestamp": ms, "Bid": [1.0, 1.1], "Ask": [1.2, 1.3]}), path)
    batches = read(path, symbol="X")  # the kind, too, comes from the names
    assert batches[0].kind == "quotes"
    table = table_of(batches)
    assert table.column("ts_event").cast(pa.int64()).to_pylist() == (ms * 10**6).tolist()
    assert table.column("ask_px").to_pylist() == [1.2, 1.3]
    assert batches[0].inference is not None
    assert dict(batches[0].inference.columns)["bid_px"] == "Bid"


def test_normalize_spellings() -> None:
    assert normalize("Best Bid Price") == "best_bid_price"
    assert normalize("askPrice") == "ask_price"
    assert normalize('"<TICKER>"') == "ticker"


def test_job_reports_and_the_cli_prints_the_inferred_mapping(tmp_path: Path) -> None:
    options = IngestOptions(read=ReadOptions(symbol="USD/JPY"))
    result = ingest([str(USDJPY)], str(tmp_path / "store"), options, progress=False)
    [report] = result.files
    assert report.schema == "quotes"  # from the header
    assert report.rows_read == report.rows_stored + report.rows_quarantined == 1000
    assert report.inference is not None
    assert report.inference["columns"] == {
        "ts_event": "timestamp",
        "bid_px": "bid",
        "ask_px": "ask",
    }
    exe = Path(sys.executable).parent / "ticktensor"
    out = tmp_path / "store2"
    cmd = [str(exe), "ingest", str(BARS), "--out", str(out), "--symbol", "BTC-PERP"]
    cmd += ["--quiet", "--report", str(tmp_path / "r.json")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert "columns: ts_event=timestamp" in run.stdout
    assert "interval_ns: 60000000000 ns (1 min, from the file name)" in run.stdout
    [saved] = json.loads((tmp_path / "r.json").read_text())
    assert saved["inference"]["columns"]["volume"] == "volume"
    assert saved["rows_read"] == saved["rows_stored"] + saved["rows_quarantined"] == 45_031


def test_histdata_layout_is_recognised_without_ts_format() -> None:
    path = DATA / "fx" / "quote_tick_data.csv"
    fmt = CsvFormat(header=False, columns={"ts_event": "0", "bid_px": "1", "ask_px": "2"})
    explicit = CsvFormat(
        header=False,
        columns={"ts_event": "0", "bid_px": "1", "ask_px": "2"},
        ts_format="%Y%m%d %H%M%S%f",
    )
    batches = read(path, kind="quotes", symbol="EUR/USD", csv=fmt)
    reference = read(path, kind="quotes", symbol="EUR/USD", csv=explicit)
    assert table_of(batches).equals(table_of(reference))
    assert table_of(batches).num_rows == 9_500
    assert batches[0].inference is not None
    assert "ts_event: text as '%Y%m%d %H%M%S%f', naive times in UTC" in batches[0].inference.notes
