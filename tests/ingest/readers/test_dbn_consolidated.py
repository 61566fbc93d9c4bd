"""Consolidated DBN schemas (cmbp-1, cbbo-1s/1m, tcbbo) as quotes, written with
databento-dbn's own encoder and compared with its decoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import databento_dbn as db
import pyarrow as pa
import pytest

from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import ReadOptions
from ticktensor.ingest.readers.dbn import DbnReader

from ._dbn_files import T0
from ._dbn_files import metadata as dbn_metadata

UNDEF = 2**63 - 1


def encode(schema: str, records: list[Any]) -> bytes:
    header = dbn_metadata(
        schema, {"AAPL  240816C00220000": 7}, dataset="OPRA.PILLAR", end=T0 + 10**9
    )
    return header + b"".join(bytes(r) for r in records)


def pair(i: int) -> Any:
    bid = UNDEF if i == 2 else (2_150_000_000 + i * 10_000_000)  # record 2: empty bid side
    return db.ConsolidatedBidAskPair(
        bid_px=bid, ask_px=2_300_000_000 + i * 10_000_000, bid_sz=10 + i, ask_sz=20 + i,
        bid_pb=i % 3, ask_pb=(i + 1) % 3,
    )  # fmt: skip


def records(schema: str, n: int = 5) -> list[Any]:
    rtype = {"cmbp-1": 0xB1, "cbbo-1s": 0xC0, "cbbo-1m": 0xC1, "tcbbo": 0xC2}[schema]
    out: list[Any] = []
    for i in range(n):
        common: dict[str, Any] = {
            "rtype": rtype, "publisher_id": 1, "instrument_id": 7, "ts_event": T0 + i * 1000,
            "price": 2_200_000_000 + i, "size": 1 + i,
            "side": db.Side.BID if i % 2 else db.Side.ASK,
            "ts_recv": T0 + i * 1000 + 7, "levels": pair(i),
        }  # fmt: skip
        if schema in ("cmbp-1", "tcbbo"):
            out.append(db.CMBP1Msg(action=db.Action.TRADE, **common))
        else:
            out.append(db.CBBOMsg(**common))
    return out


def reference(raw: bytes) -> list[Any]:
    decoder = db.DBNDecoder(upgrade_policy=db.VersionUpgradePolicy.AS_IS)
    decoder.write(raw)
    _, *decoded = decoder.decode()
    return decoded


@pytest.mark.parametrize("schema", ["cmbp-1", "cbbo-1s", "cbbo-1m", "tcbbo"])
def test_consolidated_top_of_book_as_quotes(tmp_path: Path, schema: str) -> None:
    raw = encode(schema, records(schema))
    path = tmp_path / f"opra.{schema}.dbn"
    path.write_bytes(raw)
    batches = list(DbnReader().read(expand_inputs([str(path)])[0], ReadOptions()))
    table = pa.concat_tables([b.table for b in batches])
    assert {b.kind.value for b in batches} == {"quotes"}
    theirs = reference(raw)
    assert table.num_rows == len(theirs) == 5

    def px(value: int) -> float | None:
        return None if value == UNDEF else value / 1e9

    assert table.column("bid_px").to_pylist() == [px(r.bid_px_00) for r in theirs]
    assert table.column("ask_px").to_pylist() == [px(r.ask_px_00) for r in theirs]
    bid_sz = [None if r.bid_px_00 == UNDEF else float(r.bid_sz_00) for r in theirs]
    assert table.column("bid_sz").to_pylist() == bid_sz
    assert table.column("ask_sz").to_pylist() == [float(r.ask_sz_00) for r in theirs]
    # cbbo samples are on their sample time, ts_recv; the other schemas on ts_event.
    times = [r.ts_recv if schema.startswith("cbbo") else r.ts_event for r in theirs]
    assert table.column("ts_event").cast(pa.int64()).to_pylist() == times
    assert table.column("ts_recv").cast(pa.int64()).to_pylist() == [r.ts_recv for r in theirs]
    assert set(table.column("symbol").to_pylist()) == {"AAPL  240816C00220000"}
    # Consolidated levels carry publisher ids, not order counts; records no sequence.
    for name in ("bid_ct", "ask_ct", "sequence"):
        assert table.column(name).null_count == 5


def test_tcbbo_trades(tmp_path: Path) -> None:
    raw = encode("tcbbo", records("tcbbo"))
    path = tmp_path / "opra.tcbbo.dbn"
    path.write_bytes(raw)
    options = ReadOptions(kind="trades")
    [batch] = list(DbnReader().read(expand_inputs([str(path)])[0], options))
    theirs = reference(raw)
    assert batch.table.column("price").to_pylist() == [r.price / 1e9 for r in theirs]
    assert batch.table.column("size").to_pylist() == [float(r.size) for r in theirs]
    assert batch.table.column("side").to_pylist() == [1 if r.side == "B" else -1 for r in theirs]
