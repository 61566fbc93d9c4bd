"""Binance futures depth files (``symbol,timestamp,first_update_id,last_update_id,side,
update_type,price,qty,pu``): a snapshot and set updates rebuilt into MBP-10 with the
websocket reader's gap rules, compared with a plain reference book; never trades."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ticktensor.errors import ConfigError, SchemaError
from ticktensor.ingest._job import IngestOptions, ingest
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import CsvReader, EventBatch, ReadOptions, detect
from ticktensor.schemas import EventKind

HEADER = "symbol,timestamp,first_update_id,last_update_id,side,update_type,price,qty,pu"
T0 = 1_704_067_200_000  # ms

SNAPSHOT = [("b", 100.0, 1.0), ("b", 99.5, 2.0), ("a", 100.5, 1.0), ("a", 101.0, 3.0)]
#: (U, u, pu, levels); the first is in the snapshot already, the fourth leaves a gap.
UPDATES: list[tuple[int, int, int, list[tuple[str, float, float]]]] = [
    (95, 99, 94, [("b", 100.0, 9.0)]),
    (99, 102, 98, [("b", 100.0, 1.5), ("a", 100.5, 0.0), ("a", 102.0, 4.0)]),
    (103, 105, 102, [("b", 100.25, 0.5)]),
    (108, 110, 107, [("a", 101.0, 1.0)]),
    (111, 112, 110, [("b", 99.0, 1.0)]),
]


def snap_lines(last: int = 100) -> list[str]:
    return [f"BTCUSDT,{T0},{last},{last},{s},snap,{p},{q},-1" for s, p, q in SNAPSHOT]


def update_lines() -> list[str]:
    return [
        f"BTCUSDT,{T0 + 10 * i + 5},{first},{last},{side},set,{price},{qty},{pu}"
        for i, (first, last, pu, levels) in enumerate(UPDATES)
        for side, price, qty in levels
    ]


def write(path: Path, lines: list[str]) -> Path:
    text = HEADER + "\n" + "\n".join(lines) + "\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def read(path: Path, **options: Any) -> list[EventBatch]:
    source = expand_inputs([str(path)])[0]
    return list(detect(source).read(source, ReadOptions(**options)))


def reference_tops() -> list[tuple[float, float, float, float]]:
    """Best bid/ask (price, size) after each applied update, from two plain dicts."""
    bids = {p: q for s, p, q in SNAPSHOT if s == "b"}
    asks = {p: q for s, p, q in SNAPSHOT if s == "a"}
    tops = [(max(bids), bids[max(bids)], min(asks), asks[min(asks)])]  # the snapshot
    for _, _, _, levels in UPDATES[1:3]:  # the two updates the rules let through
        for side, price, qty in levels:
            book = bids if side == "b" else asks
            if qty == 0:
                book.pop(price, None)
            else:
                book[price] = qty
        tops.append((max(bids), bids[max(bids)], min(asks), asks[min(asks)]))
    return tops


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_snapshot_and_updates_with_a_gap(tmp_path: Path, suffix: str) -> None:
    write(tmp_path / f"btcusdt-depth-snap.csv{suffix}", snap_lines())
    update = write(tmp_path / f"btcusdt-depth-update.csv{suffix}", update_lines())
    batches = read(update)
    table = pa.concat_tables([b.table for b in batches])
    rejects = pa.concat_tables([b.rejects for b in batches])
    assert {b.kind for b in batches} == {EventKind.MBP10}
    # Rows are updates, numbered by their first line: the applied ones are updates 2 and 3.
    rows = [int(r) for b in batches for r in b.rows]
    assert rows == [2, 5]
    assert table.column("action").to_pylist() == ["M", "M"]
    assert table.column("sequence").to_pylist() == [102, 105]
    tops = [
        (r["bid_px_00"], r["bid_sz_00"], r["ask_px_00"], r["ask_sz_00"])
        for r in table.select(["bid_px_00", "bid_sz_00", "ask_px_00", "ask_sz_00"]).to_pylist()
    ]
    assert tops == reference_tops()[1:]
    ts = table.column("ts_event").cast(pa.int64()).to_pylist()
    assert ts == [(T0 + 15) * 10**6, (T0 + 25) * 10**6]
    assert rejects.column("row").to_pylist() == [1, 6, 7]
    assert rejects.column("rule").to_pylist() == ["superseded", "sequence_gap", "sequence_gap"]
    assert "pu=107" in rejects.column("message")[1].as_py()
    notes = next(b.inference.notes for b in batches if b.inference is not None)
    assert any("btcusdt-depth-snap.csv" in n for n in notes)


def test_the_job_stores_snapshot_and_updates_with_exact_accounting(tmp_path: Path) -> None:
    snap = write(tmp_path / "BTCUSDT_T_DEPTH_2024-01-01_depth_snap.csv", snap_lines())
    update = write(tmp_path / "BTCUSDT_T_DEPTH_2024-01-01_depth_update.csv", update_lines())
    options = IngestOptions(workers=1)
    result = ingest([str(snap), str(update)], str(tmp_path / "store"), options, progress=False)
    by_name = {Path(f.file).name: f for f in result.files}
    snap_report = by_name[snap.name]
    update_report = by_name[update.name]
    assert snap_report.schema == update_report.schema == "mbp10"
    assert (snap_report.rows_read, snap_report.rows_stored, snap_report.rows_quarantined) == (
        1,
        1,
        0,
    )
    assert (update_report.rows_read, update_report.rows_stored) == (5, 2)
    assert update_report.rules == {"superseded": 1, "sequence_gap": 2}


@pytest.mark.parametrize("batch_rows", [2, 1 << 20])
def test_snapshot_lines_in_the_same_file_load_the_book(tmp_path: Path, batch_rows: int) -> None:
    path = write(tmp_path / "depth.csv", snap_lines() + update_lines())
    batches = read(path, batch_rows=batch_rows)  # events span the batches of lines
    table = pa.concat_tables([b.table for b in batches])
    assert table.column("action").to_pylist() == ["R", "M", "M"]
    tops = [
        (r["bid_px_00"], r["bid_sz_00"], r["ask_px_00"], r["ask_sz_00"])
        for r in table.select(["bid_px_00", "bid_sz_00", "ask_px_00", "ask_sz_00"]).to_pylist()
    ]
    assert tops == reference_tops()
    assert [int(r) for b in batches for r in b.rows] == [1, 6, 9]
    assert sum(b.rejects.num_rows for b in batches) == 3


def test_updates_without_any_snapshot_are_quarantined_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path / "lonely-depth-update.csv", update_lines())
    batches = read(path)
    rejects = pa.concat_tables([b.rejects for b in batches])
    assert sum(b.table.num_rows for b in batches) == 0
    assert set(rejects.column("rule").to_pylist()) == {"no_snapshot"}
    assert rejects.num_rows == len(UPDATES)
    assert "snap" in rejects.column("message")[0].as_py()


def test_depth_files_are_never_trades(tmp_path: Path) -> None:
    path = write(tmp_path / "depth.csv", snap_lines())
    with pytest.raises(SchemaError, match="order-book updates"):
        list(CsvReader().read(expand_inputs([str(path)])[0], ReadOptions(kind="trades")))
    with pytest.raises(ConfigError, match="mbp10"):
        read(path, kind="trades")


def test_a_parquet_of_book_updates_is_not_read_as_trades(tmp_path: Path) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from ticktensor.ingest.readers import ParquetReader

    csv_path = write(tmp_path / "depth.csv", snap_lines() + update_lines())
    path = tmp_path / "depth.parquet"
    pq.write_table(pacsv.read_csv(csv_path), path)
    with pytest.raises(SchemaError, match=r"order-book updates.*not trades"):
        list(ParquetReader().read(expand_inputs([str(path)])[0], ReadOptions()))
