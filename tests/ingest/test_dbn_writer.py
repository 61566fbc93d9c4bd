"""DBN writing: our encoder's files decode identically with databento-dbn and our reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ticktensor.ingest import SyntheticMarket, generate_day
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.dbn_writer import encode_dbn
from ticktensor.ingest.readers import get_reader
from ticktensor.ingest.readers._base import ReadOptions
from ticktensor.schemas import EventKind

MARKET = SyntheticMarket(symbols=("AAA", "BBB"), quotes_per_day=400, trades_per_day=120)


def day_table(kind: EventKind) -> pa.Table:
    tables = [generate_day(MARKET, s, MARKET.days[0])[kind] for s in MARKET.symbols]
    merged = pa.concat_tables(tables)
    return merged.sort_by([("ts_event", "ascending"), ("symbol", "ascending")])


@pytest.mark.parametrize("kind", [EventKind.TRADES, EventKind.QUOTES])
def test_databento_decodes_what_we_encode(kind: EventKind) -> None:
    import databento_dbn as db

    table = day_table(kind)
    decoder = db.DBNDecoder()
    decoder.write(encode_dbn(table, kind))
    metadata, *records = decoder.decode()
    assert len(records) == table.num_rows
    ids = {raw: int(intervals[0]["symbol"]) for raw, intervals in metadata.mappings.items()}
    assert [r.instrument_id for r in records] == [ids[s] for s in table["symbol"].to_pylist()]
    assert [r.ts_event for r in records] == table["ts_event"].cast(pa.int64()).to_pylist()
    if kind is EventKind.TRADES:
        np.testing.assert_allclose([r.price / 1e9 for r in records], table["price"].to_pylist())
        assert [r.size for r in records] == [int(x) for x in table["size"].to_pylist()]
        sides = {1: "B", -1: "A", 0: "N"}
        assert [str(r.side) for r in records] == [sides[s] for s in table["side"].to_pylist()]
    else:
        np.testing.assert_allclose(
            [r.levels[0].bid_px / 1e9 for r in records], table["bid_px"].to_pylist()
        )
        np.testing.assert_allclose(
            [r.levels[0].ask_px / 1e9 for r in records], table["ask_px"].to_pylist()
        )


@pytest.mark.parametrize("kind", [EventKind.TRADES, EventKind.QUOTES])
def test_our_reader_roundtrips_the_encoder(tmp_path: Path, kind: EventKind) -> None:
    import zstandard

    table = day_table(kind)
    path = tmp_path / f"day.{kind.value}.dbn.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(encode_dbn(table, kind)))
    (source,) = expand_inputs([str(path)])
    batches = list(get_reader("dbn").read(source, ReadOptions(batch_rows=97)))
    got = pa.concat_tables([b.table for b in batches])
    cols = ["ts_event", "symbol", "price", "size", "side"]
    if kind is EventKind.QUOTES:
        cols = ["ts_event", "symbol", "bid_px", "ask_px", "bid_sz", "ask_sz"]
    for col in cols:
        want = table[col].cast(got.schema.field(col).type)
        assert got[col].equals(want), col
