"""Real Binance BTCUSDT samples, mapped into the canonical schemas, conform and validate."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ticktensor.schemas import EventKind, conform, schema_for, validate

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "binance"

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"real data samples not found at {DATA}")


def _binance_trades() -> pa.Table:
    raw = pq.read_table(DATA / "btcusdt-trades.parquet")
    # buyer_maker "True": the buyer rested, so the aggressor sold (side -1).
    buyer_maker = pc.equal(raw.column("buyer_maker"), "True")
    side = pc.if_else(buyer_maker, pa.scalar(-1, pa.int8()), pa.scalar(1, pa.int8()))
    return pa.table(
        {
            "ts_event": raw.column("timestamp"),
            "symbol": pa.repeat(pa.scalar("BTCUSDT"), raw.num_rows),
            "venue": pa.repeat(pa.scalar("BINANCE"), raw.num_rows),
            "price": raw.column("price"),
            "size": raw.column("quantity"),
            "side": side,
            "trade_id": raw.column("trade_id"),
        }
    )


def _binance_quotes() -> pa.Table:
    raw = pq.read_table(DATA / "btcusdt-quotes.parquet")
    return pa.table(
        {
            "ts_event": raw.column("timestamp"),
            "symbol": raw.column("symbol"),
            "bid_px": raw.column("bid"),
            "ask_px": raw.column("ask"),
            "bid_sz": raw.column("bid_size"),
            "ask_sz": raw.column("ask_size"),
        }
    )


def test_binance_trades_conform_and_validate() -> None:
    table = conform(_binance_trades(), EventKind.TRADES)
    assert table.schema == schema_for(EventKind.TRADES)
    assert table.num_rows == 2001
    assert set(table.column("side").unique().to_pylist()) == {-1, 1}
    result = validate(table, EventKind.TRADES)
    assert result.ok, result.violations.slice(0, 5).to_pylist()


def test_binance_quotes_conform_and_validate() -> None:
    table = conform(_binance_quotes(), EventKind.QUOTES)
    assert table.schema == schema_for(EventKind.QUOTES)
    assert table.num_rows == 451
    start = pc.cast(pc.min(table.column("ts_event")), pa.int64()).as_py()
    end = pc.cast(pc.max(table.column("ts_event")), pa.int64()).as_py() + 1
    result = validate(table, EventKind.QUOTES, ts_range=(start, end))
    assert result.ok, result.violations.slice(0, 5).to_pylist()


def test_a_corrupted_real_row_is_named() -> None:
    raw = _binance_trades()
    prices = raw.column("price").to_pylist()
    prices[1204] = -3.5
    table = raw.set_column(raw.schema.get_field_index("price"), "price", pa.array(prices))
    result = validate(table, "trades")
    assert result.bad_rows().tolist() == [1204]
    with pytest.raises(
        ValueError, match=r"^btcusdt-trades.parquet row 1204: price -3.5 is not pos"
    ):
        result.raise_first("btcusdt-trades.parquet")
