"""TardisReader against a plain-csv decode of real tardis.dev samples, plus edge cases."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from ticktensor.errors import ConfigError
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers._base import EventBatch, ReadOptions
from ticktensor.ingest.readers.tardis import TardisReader
from ticktensor.schemas import EventKind, conform

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "tardis"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"no tardis samples in {DATA}")


def _read(path: Path, **options: Any) -> list[EventBatch]:
    return list(TardisReader().read(expand_inputs([str(path)])[0], ReadOptions(**options)))


def _table(batches: list[EventBatch]) -> pa.Table:
    return pa.concat_tables([b.table for b in batches])


def _records(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _num(text: str) -> float | None:
    return float(text) if text else None


def _check_header(table: pa.Table, records: list[dict[str, str]]) -> None:
    got = table.to_pydict()
    assert table.column("ts_event").cast(pa.int64()).to_pylist() == [
        int(r["timestamp"]) * 1000 for r in records
    ]
    assert table.column("ts_recv").cast(pa.int64()).to_pylist() == [
        int(r["local_timestamp"]) * 1000 for r in records
    ]
    assert got["symbol"] == [r["symbol"] for r in records]
    assert got["venue"] == [r["exchange"] for r in records]


@needs_data
def test_trades() -> None:
    path = DATA / "bitmex_trades_XBTUSD.csv"
    table = conform(_table(_read(path)), EventKind.TRADES)
    records = _records(path)
    _check_header(table, records)
    got = table.to_pydict()
    assert got["price"] == [float(r["price"]) for r in records]
    assert got["size"] == [float(r["amount"]) for r in records]
    assert got["side"] == [{"buy": 1, "sell": -1}.get(r["side"], 0) for r in records]
    assert got["trade_id"] == [r["id"] for r in records]


@needs_data
def test_quotes() -> None:
    path = DATA / "huobi-dm-swap_quotes_BTC-USD.csv"
    table = conform(_table(_read(path)), EventKind.QUOTES)
    records = _records(path)
    _check_header(table, records)
    for side in ("bid", "ask"):
        assert table.column(f"{side}_px").to_pylist() == [_num(r[f"{side}_price"]) for r in records]
        assert table.column(f"{side}_sz").to_pylist() == [
            _num(r[f"{side}_amount"]) for r in records
        ]


@needs_data
@pytest.mark.parametrize("depth", [5, 25])
def test_book_snapshots_as_mbp10_and_quotes(depth: int) -> None:
    path = DATA / f"binance-futures_book_snapshot_{depth}_BTCUSDT.csv"
    records = _records(path)
    table = conform(_table(_read(path)), EventKind.MBP10)
    _check_header(table, records)
    for level in range(10):
        for side in ("bid", "ask"):
            want = [_num(r.get(f"{side}s[{level}].price", "")) for r in records]
            assert table.column(f"{side}_px_{level:02d}").to_pylist() == want
            want = [_num(r.get(f"{side}s[{level}].amount", "")) for r in records]
            assert table.column(f"{side}_sz_{level:02d}").to_pylist() == want
    assert set(table.column("action").to_pylist()) == {"R"}
    quotes = conform(_table(_read(path, kind=EventKind.QUOTES)), EventKind.QUOTES)
    assert quotes.column("bid_px").to_pylist() == [float(r["bids[0].price"]) for r in records]


def _reference_book(records: list[dict[str, str]]) -> list[tuple[list[float], list[float]]]:
    """Slow, obvious rebuild: the sorted ask and bid prices after every row."""
    bids: dict[float, float] = {}
    asks: dict[float, float] = {}
    out = []
    in_snapshot = False
    for r in records:
        snapshot = r["is_snapshot"] == "true"
        if snapshot and not in_snapshot:
            bids, asks = {}, {}
        in_snapshot = snapshot
        book = bids if r["side"] == "bid" else asks
        if float(r["amount"]) == 0:
            book.pop(float(r["price"]), None)
        else:
            book[float(r["price"])] = float(r["amount"])
        out.append((sorted(asks)[:10], sorted(bids, reverse=True)[:10]))
    return out


@needs_data
def test_incremental_l2_rebuilds_the_book() -> None:
    path = DATA / "deribit_incremental_book_L2_BTC-PERPETUAL.csv"
    records = _records(path)
    table = conform(_table(_read(path, batch_rows=4)), EventKind.MBP10)
    _check_header(table, records)
    for i, (asks, bids) in enumerate(_reference_book(records)):
        row = table.slice(i, 1).to_pylist()[0]
        assert [row[f"ask_px_{k:02d}"] for k in range(len(asks))] == asks
        assert [row[f"bid_px_{k:02d}"] for k in range(len(bids))] == bids
        assert row[f"ask_px_{len(asks):02d}"] is None if len(asks) < 10 else True


def _l2(tmp_path: Path) -> Path:
    lines = [
        "exchange,symbol,timestamp,local_timestamp,is_snapshot,side,price,amount",
        "x,A,1,2,true,bid,10,1",
        "x,A,1,2,true,ask,11,2",
        "x,B,1,2,true,bid,5,1",
        "x,A,3,4,false,bid,10.5,3",
        "x,A,5,6,false,bid,10.5,0",
        "x,A,7,8,false,ask,11,4",
        "x,A,9,9,true,bid,9,1",
        "x,B,9,9,false,ask,6,1",
    ]
    path = tmp_path / "l2.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_l2_actions_per_symbol_and_new_snapshot(tmp_path: Path) -> None:
    table = _table(_read(_l2(tmp_path), kind=EventKind.QUOTES))
    got = table.to_pydict()
    assert got["bid_px"] == [10.0, 10.0, 5.0, 10.5, 10.0, 10.0, 9.0, 5.0]
    assert got["ask_px"] == [None, 11.0, None, 11.0, 11.0, 11.0, None, 6.0]
    mbp = _table(_read(_l2(tmp_path)))
    assert mbp.column("action").to_pylist() == ["A", "A", "A", "A", "C", "M", "A", "A"]


def test_batches_of_three_equal_one_batch(tmp_path: Path) -> None:
    path = _l2(tmp_path)
    small, whole = _read(path, batch_rows=3), _read(path)
    assert max(b.table.num_rows for b in small) <= 3
    assert _table(small).equals(_table(whole))
    rows = np.concatenate([b.rows for b in small])
    assert rows.tolist() == list(range(1, 9))


def test_bad_value_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "exchange,symbol,timestamp,local_timestamp,id,side,price,amount\n"
        "x,A,1,2,a,buy,10,1\n"
        "x,A,3,4,b,sell,ten,1\n"
    )
    batches = _read(path)
    assert _table(batches).num_rows == 1
    (reject,) = pa.concat_tables([b.rejects for b in batches]).to_pylist()
    assert (reject["row"], reject["column"], reject["value"]) == (2, "price", "ten")
    assert "t.csv row 2: column price value 'ten'" in reject["message"]


def test_unknown_header_and_wrong_kind(tmp_path: Path) -> None:
    path = tmp_path / "liq.csv"
    path.write_text("exchange,symbol,timestamp,local_timestamp,funding_rate\nx,A,1,2,0.1\n")
    assert not TardisReader.sniff("liq.csv", path.read_bytes())
    with pytest.raises(ConfigError, match=r"unknown tardis\.dev CSV header"):
        _read(path)
    with pytest.raises(ConfigError, match="requested kind 'mbo' but tardis dataset 'trades'"):
        _read(_trades(tmp_path), kind=EventKind.MBO)


def _trades(tmp_path: Path) -> Path:
    path = tmp_path / "trades.csv"
    path.write_text("exchange,symbol,timestamp,local_timestamp,id,side,price,amount\n")
    assert TardisReader.sniff("trades.csv", path.read_bytes())
    return path
