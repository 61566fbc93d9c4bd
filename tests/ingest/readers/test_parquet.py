"""The Parquet reader on real pandas-written files and on typed edge cases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ticktensor.errors import ConfigError, SchemaError
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import CsvFormat, EventBatch, ParquetReader, ReadOptions
from ticktensor.schemas import conform, schema_for

BINANCE = Path(__file__).resolve().parents[3].parent.joinpath("shared/data/binance")
TRADES_FMT = CsvFormat(
    columns={"ts_event": "timestamp", "size": "quantity", "side": "buyer_maker"},
    side_map={"True": -1, "False": 1},
)


def read(path: Path | str, **options: object) -> list[EventBatch]:
    source = expand_inputs([str(path)])[0]
    return list(ParquetReader().read(source, ReadOptions(**options)))  # type: ignore[arg-type]


def test_binance_trades_match_pyarrow() -> None:
    path = BINANCE / "btcusdt-trades.parquet"
    batches = read(path, kind="trades", symbol="BTCUSDT", batch_rows=300, csv=TRADES_FMT)
    assert all(b.table.num_rows <= 300 for b in batches)
    table = pa.concat_tables([b.table for b in batches])
    direct = pq.read_table(path)
    assert table.num_rows == direct.num_rows == 2001
    assert np.concatenate([b.rows for b in batches]).tolist() == list(range(1, 2002))
    want_ts = direct.column("timestamp").cast(pa.timestamp("ns", "UTC")).cast(pa.int64())
    assert table.column("ts_event").cast(pa.int64()).equals(want_ts)
    assert table.column("price").equals(direct.column("price"))
    assert table.column("size").equals(direct.column("quantity"))
    maker = direct.column("buyer_maker").to_pylist()
    assert table.column("side").to_pylist() == [-1 if m == "True" else 1 for m in maker]
    assert table.column("trade_id").to_pylist() == [str(v) for v in direct["trade_id"].to_pylist()]
    assert conform(table, "trades").schema.equals(schema_for("trades"), check_metadata=True)


def test_binance_quotes_with_symbol_column() -> None:
    path = BINANCE / "btcusdt-quotes.parquet"
    fmt = CsvFormat(
        columns={
            "ts_event": "timestamp",
            "bid_px": "bid",
            "ask_px": "ask",
            "bid_sz": "bid_size",
            "ask_sz": "ask_size",
        }
    )
    table = pa.concat_tables([b.table for b in read(path, kind="quotes", csv=fmt)])
    direct = pq.read_table(path)
    assert table.column("symbol").equals(direct.column("symbol"))
    for ours, theirs in (("bid_px", "bid"), ("ask_px", "ask"), ("ask_sz", "ask_size")):
        assert table.column(ours).equals(direct.column(theirs))


@pytest.mark.parametrize(
    ("array", "fmt"),
    [
        (pa.array([1, 2], pa.timestamp("s")), CsvFormat()),
        (pa.array([1000, 2000], pa.timestamp("ms", "America/New_York")), CsvFormat()),
        (pa.array([10**9, 2 * 10**9], pa.int64()), CsvFormat(ts_unit="ns")),
        (pa.array([1, 2], pa.int32()), CsvFormat(ts_unit="s")),
        (pa.array(["1970-01-01T00:00:01Z", "1970-01-01 00:00:02+00:00"]), CsvFormat()),
    ],
)
def test_timestamps_of_any_unit_and_zone_become_ns_utc(
    tmp_path: Path, array: pa.Array, fmt: CsvFormat
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"ts_event": array, "price": [1.0, 2.0], "size": [1, 2]}), path)
    [batch] = read(path, kind="trades", symbol="X", csv=fmt)
    assert batch.table.column("ts_event").type == pa.timestamp("ns", "UTC")
    assert batch.table.column("ts_event").cast(pa.int64()).to_pylist() == [10**9, 2 * 10**9]


def test_uncastable_values_are_rejects_and_types_a_schema_error(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    table = pa.table({"ts_event": [1, 2, 3], "price": ["1.5", "abc", "2.5"], "size": [1, 2, 3]})
    pq.write_table(table, path)
    [batch] = read(path, kind="trades", symbol="X")
    assert batch.rows.tolist() == [1, 3]
    assert batch.table.column("price").to_pylist() == [1.5, 2.5]
    [reject] = batch.rejects.to_pylist()
    assert reject["row"] == 2
    assert reject["column"] == "price"
    assert reject["value"] == "abc"
    assert "t.parquet row 2" in reject["message"]
    assert json.loads(reject["raw"])["price"] == "abc"
    pq.write_table(pa.table({"ts_event": [1], "price": [[1.0]], "size": [1]}), path)
    with pytest.raises(SchemaError, match=r"'price'.*list<element: double>"):
        read(path, kind="trades", symbol="X")


def test_kind_from_metadata_or_column_names_or_config_error(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    table = pa.table({"ts_event": [1], "symbol": ["X"], "price": [1.0], "size": [1.0]})
    table = table.append_column("side", pa.array([1], pa.int8()))
    pq.write_table(table.rename_columns(["ts_event", "symbol", "a1", "b1", "side"]), path)
    with pytest.raises(ConfigError, match=r"columns \['ts_event'.*trades, quotes"):
        read(path)
    pq.write_table(table, path)
    assert read(path)[0].kind == "trades"  # price and size say trades
    pq.write_table(conform(table, "trades"), path)
    [batch] = read(path)
    assert batch.kind == "trades"
