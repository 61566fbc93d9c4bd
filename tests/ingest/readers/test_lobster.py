"""LobsterReader against a plain-csv decode of LOBSTER's AMZN sample, plus edge cases."""

from __future__ import annotations

import csv
import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pytest

from ticktensor.errors import ConfigError
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers._base import EventBatch, ReadOptions
from ticktensor.ingest.readers.lobster import LobsterReader
from ticktensor.schemas import EventKind, conform

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "lobster"
STEM = "AMZN_2012-06-21_34200000_57600000"
MESSAGE = DATA / f"{STEM}_message_1.csv"
needs_data = pytest.mark.skipif(not MESSAGE.exists(), reason=f"no LOBSTER sample in {DATA}")
ACTIONS = {1: "A", 2: "C", 3: "C", 4: "F", 5: "F", 6: "T"}


def _read(path: Path, **options: Any) -> list[EventBatch]:
    return list(LobsterReader().read(expand_inputs([str(path)])[0], ReadOptions(**options)))


def _table(batches: list[EventBatch]) -> pa.Table:
    return pa.concat_tables([b.table for b in batches])


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    return rows[1:] if rows and not rows[0][0][:1].isdigit() else rows


def _ts_ns(seconds: str, day: dt.date) -> int:
    local = dt.datetime(day.year, day.month, day.day, tzinfo=ZoneInfo("America/New_York"))
    midnight_ns = int(local.timestamp()) * 10**9
    return midnight_ns + int(Decimal(seconds) * 10**9)


def _px(value: str) -> float | None:
    return None if abs(int(value)) == 9999999999 else int(value) / 10_000


def _ns(table: pa.Table) -> list[int]:
    return table.column("ts_event").cast(pa.int64()).to_pylist()


@needs_data
def test_mbo_matches_plain_csv_decode() -> None:
    batches = _read(MESSAGE, batch_rows=20_000)
    table = conform(_table(batches), EventKind.MBO)
    day = dt.date(2012, 6, 21)
    messages = _rows(MESSAGE)
    assert table.num_rows == len(messages) == 57_515
    assert np.concatenate([b.rows for b in batches]).tolist() == list(range(1, 57_516))
    got = table.to_pydict()
    ts = _ns(table)
    for i, (time, etype, oid, size, price, direction) in enumerate(messages):
        assert ts[i] == _ts_ns(time, day), f"row {i + 1} ts"
        assert got["action"][i] == ACTIONS[int(etype)], f"row {i + 1} action"
        assert got["order_id"][i] == int(oid)
        assert got["size"][i] == float(size)
        assert got["price"][i] == int(price) / 10_000
        assert got["side"][i] == int(direction)
    assert set(got["symbol"]) == {"AMZN"}
    assert str(batches[0].raw[0]) == ",".join(messages[0])  # type: ignore[index]


@needs_data
def test_trades_are_executions_with_the_aggressor_side() -> None:
    batches = _read(MESSAGE, kind=EventKind.TRADES)
    table = conform(_table(batches), EventKind.TRADES)
    executions = [(i + 1, r) for i, r in enumerate(_rows(MESSAGE)) if r[1] in ("4", "5")]
    assert table.num_rows == len(executions)
    assert np.concatenate([b.rows for b in batches]).tolist() == [i for i, _ in executions]
    assert table.column("side").to_pylist() == [-int(r[5]) for _, r in executions]
    assert table.column("price").to_pylist() == [int(r[4]) / 10_000 for _, r in executions]


@needs_data
@pytest.mark.parametrize("kind", [EventKind.QUOTES, EventKind.MBP10])
def test_book_rows_align_with_orderbook_file(kind: EventKind) -> None:
    table = conform(_table(_read(MESSAGE, kind=kind, batch_rows=10_000)), kind)
    book = _rows(DATA / f"{STEM}_orderbook_1.csv")
    suffix = "" if kind is EventKind.QUOTES else "_00"
    got = table.to_pydict()
    assert table.num_rows == len(book)
    assert got[f"ask_px{suffix}"] == [_px(r[0]) for r in book]
    assert got[f"bid_px{suffix}"] == [_px(r[2]) for r in book]
    assert got[f"ask_sz{suffix}"] == [None if _px(r[0]) is None else float(r[1]) for r in book]
    assert got[f"bid_sz{suffix}"] == [None if _px(r[2]) is None else float(r[3]) for r in book]
    if kind is EventKind.MBP10:
        assert table.column("bid_px_01").null_count == table.num_rows


def _pair(tmp_path: Path, book: bool = True, header: bool = False) -> Path:
    message = tmp_path / "XYZ_2021-01-04_34200000_57600000_message_2.csv"
    lines = [
        "34200.000000001,1,10,100,1000000,1",
        "34200.5,1,11,50,1001000,-1",
        "34201.25,4,10,40,1000000,1",
        "34202,3,11,50,1001000,-1",
        "34203,7,0,0,-1,-1",
    ]
    books = [
        "9999999999,0,1000000,100,9999999999,0,-9999999999,0",
        "1001000,50,1000000,100,9999999999,0,-9999999999,0",
        "1001000,50,1000000,60,9999999999,0,-9999999999,0",
        "9999999999,0,1000000,60,9999999999,0,-9999999999,0",
        "9999999999,0,1000000,60,9999999999,0,-9999999999,0",
    ]
    head = "Time,Type,OrderId,Size,Price,Direction\n" if header else ""
    message.write_text(head + "\n".join(lines) + "\n")
    if book:
        orderbook = tmp_path / message.name.replace("_message_", "_orderbook_")
        orderbook.write_text("\n".join(books) + "\n")
    return message


@pytest.mark.parametrize("kind", [EventKind.MBO, EventKind.TRADES, EventKind.MBP10])
def test_batches_of_three_equal_one_batch(tmp_path: Path, kind: EventKind) -> None:
    message = _pair(tmp_path)
    small, whole = _read(message, kind=kind, batch_rows=3), _read(message, kind=kind)
    assert max(b.table.num_rows for b in small) <= 3
    assert _table(small).equals(_table(whole))
    assert (
        np.concatenate([b.rows for b in small]).tolist()
        == np.concatenate([b.rows for b in whole]).tolist()
    )


def test_header_or_not_same_result_and_new_york_time(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = _table(_read(_pair(tmp_path / "a")))
    headed = _table(_read(_pair(tmp_path / "b", header=True)))
    assert plain.equals(headed)
    # 2021-01-04 is winter: New York is UTC-5, so 09:30 local is 14:30 UTC
    first = dt.datetime(2021, 1, 4, 14, 30, tzinfo=dt.UTC)
    assert _ns(plain)[0] == int(first.timestamp()) * 10**9 + 1
    assert plain.column("action").to_pylist() == ["A", "A", "F", "C", "H"]
    assert plain.column("price").to_pylist()[-1] is None  # a halt has no price


def test_empty_levels_are_null(tmp_path: Path) -> None:
    table = _table(_read(_pair(tmp_path), kind=EventKind.MBP10))
    assert table.column("ask_px_00").to_pylist() == [None, 100.1, 100.1, None, None]
    assert table.column("ask_sz_00").to_pylist() == [None, 50.0, 50.0, None, None]
    assert table.column("bid_px_01").null_count == 5


def test_missing_orderbook_is_a_clear_error(tmp_path: Path) -> None:
    message = _pair(tmp_path, book=False)
    assert _table(_read(message)).num_rows == 5  # mbo needs no orderbook
    with pytest.raises(ConfigError, match=r"orderbook file .*_orderbook_2\.csv"):
        _read(message, kind=EventKind.QUOTES)


def test_undecodable_line_is_rejected_with_row_column_value(tmp_path: Path) -> None:
    message = _pair(tmp_path)
    text = message.read_text().splitlines()
    text[1] = "34200.5,1,11,fifty,1001000,-1"
    text[3] = "34202,3,11"
    message.write_text("\n".join(text) + "\n")
    batches = _read(message, kind=EventKind.QUOTES)
    assert np.concatenate([b.rows for b in batches]).tolist() == [1, 3, 5]
    rejects = pa.concat_tables([b.rejects for b in batches]).sort_by("row").to_pylist()
    assert [(r["row"], r["column"], r["value"], r["rule"]) for r in rejects] == [
        (2, "size", "fifty", "unparseable"),
        (4, None, None, "field_count"),
    ]
    assert rejects[1]["raw"] == "34202,3,11"
    assert "message_2.csv row 2: column size value 'fifty'" in rejects[0]["message"]


def test_sniff_and_companion() -> None:
    assert LobsterReader.sniff(f"{STEM}_message_1.csv", b"")
    assert not LobsterReader.sniff("trades.csv", b"")
    assert LobsterReader.companion_of(f"dir/{STEM}_orderbook_10.csv") == (
        f"dir/{STEM}_message_10.csv"
    )
    assert LobsterReader.companion_of(f"{STEM}_message_1.csv") is None
