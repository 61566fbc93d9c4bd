"""Mixed-schema (live) DBN streams, written with databento-dbn's encoder: split by record
type, symbol mappings applied, system and other records skipped and counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import databento_dbn as db
import numpy as np
import pyarrow as pa
import pytest

from ticktensor.errors import InputError
from ticktensor.ingest._job import IngestOptions, ingest
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import EventBatch, ReadOptions
from ticktensor.ingest.readers.dbn import DbnReader

from ._dbn_files import T0
from ._dbn_files import metadata as dbn_metadata


def metadata(schema: str | None) -> bytes:
    return dbn_metadata(schema, {"ESU4": 5})


def mapping(iid: int, name: str, ts: int) -> Any:
    return db.SymbolMappingMsg(
        publisher_id=1, instrument_id=iid, ts_event=ts, stype_in=db.SType.RAW_SYMBOL,
        stype_in_symbol=name, stype_out=db.SType.INSTRUMENT_ID, stype_out_symbol=name,
        start_ts=ts, end_ts=ts + 10**12,
    )  # fmt: skip


def trade(iid: int, i: int) -> Any:
    return db.TradeMsg(
        publisher_id=1, instrument_id=iid, ts_event=T0 + i, price=5_000_000_000_000 + i * 10**9,
        size=1 + i, action=db.Action.TRADE, side=db.Side.ASK if i % 2 else db.Side.BID, depth=0,
        ts_recv=T0 + i + 5, sequence=100 + i,
    )  # fmt: skip


def quote(iid: int, i: int) -> Any:
    level = db.BidAskPair(
        bid_px=4_999_000_000_000 + i, ask_px=5_001_000_000_000 + i, bid_sz=3, ask_sz=4,
        bid_ct=1, ask_ct=2,
    )  # fmt: skip
    return db.MBP1Msg(
        publisher_id=1, instrument_id=iid, ts_event=T0 + i, price=5_000_000_000_000, size=1,
        action=db.Action.ADD, side=db.Side.BID, depth=0, ts_recv=T0 + i + 3, sequence=200 + i,
        levels=level,
    )  # fmt: skip


def heartbeat(ts: int) -> Any:
    return db.SystemMsg(ts_event=ts, msg="Heartbeat")


def stream() -> list[Any]:
    return [
        heartbeat(T0),
        mapping(9, "NQU4", T0),
        trade(5, 0),  # ESU4 from the metadata mapping
        quote(9, 1),  # NQU4 from the in-stream mapping
        heartbeat(T0 + 10),
        trade(9, 2),
        quote(5, 3),
        trade(77, 4),  # no mapping anywhere: the id as text
        heartbeat(T0 + 20),
    ]


def read(path: Path, **options: Any) -> list[EventBatch]:
    return list(DbnReader().read(expand_inputs([str(path)])[0], ReadOptions(**options)))


def reference(raw: bytes) -> list[Any]:
    decoder = db.DBNDecoder(upgrade_policy=db.VersionUpgradePolicy.AS_IS)
    decoder.write(raw)
    _, *records = decoder.decode()
    return records


@pytest.mark.parametrize("batch_rows", [1, 3, 1 << 20])
def test_mixed_stream_splits_by_record_type(tmp_path: Path, batch_rows: int) -> None:
    raw = metadata(None) + b"".join(bytes(r) for r in stream())
    path = tmp_path / "live.dbn"
    path.write_bytes(raw)
    batches = read(path, batch_rows=batch_rows)
    theirs = reference(raw)
    trades = pa.concat_tables([b.table for b in batches if b.kind == "trades"])
    quotes = pa.concat_tables([b.table for b in batches if b.kind == "quotes"])
    rows = {
        kind: np.concatenate([b.rows for b in batches if b.kind == kind]).tolist()
        for kind in ("trades", "quotes")
    }
    assert rows == {"trades": [3, 6, 8], "quotes": [4, 7]}  # record numbers in the file
    their_trades = [r for r in theirs if isinstance(r, db.TradeMsg)]
    their_quotes = [r for r in theirs if isinstance(r, db.MBP1Msg)]
    assert trades.column("price").to_pylist() == [r.price / 1e9 for r in their_trades]
    assert trades.column("size").to_pylist() == [float(r.size) for r in their_trades]
    assert trades.column("sequence").to_pylist() == [r.sequence for r in their_trades]
    assert trades.column("symbol").to_pylist() == ["ESU4", "NQU4", "77"]
    assert quotes.column("bid_px").to_pylist() == [r.bid_px_00 / 1e9 for r in their_quotes]
    assert quotes.column("ask_ct").to_pylist() == [r.ask_ct_00 for r in their_quotes]
    assert quotes.column("symbol").to_pylist() == ["NQU4", "ESU4"]
    assert sum(b.rejects.num_rows for b in batches) == 0
    notes = [n for b in batches if b.inference for n in b.inference.notes]
    assert notes == [
        "mixed DBN records: mbp-1 -> quotes 2, symbol mapping 1, system 3, trades -> trades 3"
    ]
    assert batches[-1].inference is not None


def test_kind_filter_and_job_counts(tmp_path: Path) -> None:
    path = tmp_path / "live.dbn"
    path.write_bytes(metadata(None) + b"".join(bytes(r) for r in stream()))
    batches = read(path, kind="quotes")
    assert {b.kind.value for b in batches} == {"quotes"}
    assert sum(b.table.num_rows for b in batches) == 2
    result = ingest([str(path)], str(tmp_path / "store"), IngestOptions(), progress=False)
    [report] = result.files
    assert report.rows_read == report.rows_stored + report.rows_quarantined == 5


def test_a_single_schema_file_with_heartbeats_reads_through(tmp_path: Path) -> None:
    records = [trade(5, 0), heartbeat(T0 + 1), trade(5, 2), trade(5, 3)]
    path = tmp_path / "trades.dbn"
    path.write_bytes(metadata("trades") + b"".join(bytes(r) for r in records))
    batches = read(path)
    rows = np.concatenate([b.rows for b in batches]).tolist()
    assert rows == [1, 3, 4]
    prices = [p for b in batches for p in b.table.column("price").to_pylist()]
    assert prices == [5000.0, 5002.0, 5003.0]


def test_truncated_and_corrupt_mixed_streams(tmp_path: Path) -> None:
    body = b"".join(bytes(r) for r in stream())
    path = tmp_path / "cut.dbn"
    path.write_bytes(metadata(None) + body[:-7])
    batches = read(path)
    rejects = pa.concat_tables([b.rejects for b in batches])
    assert rejects.column("row").to_pylist() == [9]
    assert "truncated record" in rejects.column("message")[0].as_py()
    path.write_bytes(metadata(None) + b"\x00" * 32)
    with pytest.raises(InputError, match="declares 0 bytes"):
        read(path)
