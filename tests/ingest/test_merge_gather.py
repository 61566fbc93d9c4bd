"""Staged parts in file order, gathered by symbol when a session merges: the same rows,
order and duplicates as an exact reference, whether the parts are held in memory or
staged on disk."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.ingest._convert import DAY_NS, ConvertTask, _write_parts
from ticktensor.ingest._merge import StagedSession
from ticktensor.ingest._sources import Input
from ticktensor.ingest._staging import Staging, group_parts
from ticktensor.ingest.readers import ReadOptions
from ticktensor.schemas import EventKind, conform
from ticktensor.store import Location

T0 = 1_704_205_800_000_000_000  # 2024-01-02 14:30 UTC
FILES = ("a.csv", "b.csv")

Row = tuple[int, str, float]  # ts_event, symbol, price
Batch = list[Row]


def _stage(staging: Staging, files: dict[str, list[Batch]]) -> list[tuple[str, EventKind, str]]:
    """Each file's batches staged as phase one stages them, ``_row`` counting per file."""
    parts = []
    for number, (name, batches) in enumerate(sorted(files.items())):
        source = Input(url=name, fs=fsspec.filesystem("file"), path=name, size=0)
        task = ConvertTask(source, "csv", ReadOptions(), staging, f"{number:05d}")
        row = 0
        for i, batch in enumerate(batches):
            table = pa.table(
                {
                    "ts_event": pa.array([r[0] for r in batch], pa.int64()),
                    "symbol": pa.array([r[1] for r in batch], pa.string()),
                    "price": pa.array([r[2] for r in batch], pa.float64()),
                    "size": pa.array([1.0] * len(batch)),
                    "side": pa.array([1] * len(batch), pa.int8()),
                }
            )
            rows = pa.array(range(row, row + len(batch)), pa.int64())
            row += len(batch)
            table = conform(table, EventKind.TRADES).append_column("_row", rows)
            parts += _write_parts(task, EventKind.TRADES, table, f"{task.tag}-{i:05d}", [])
    return parts


def _merged(
    staging: Staging, parts: list[tuple[str, EventKind, str]], block_rows: int
) -> dict[str, Any]:
    """Every session merged block by block: its rows, stored counts and duplicates."""
    out = {}
    for session, kinds in group_parts(parts).items():
        staged = StagedSession(staging, kinds, block_rows)
        merged = [staged.merge(EventKind.TRADES, b, False) for b in range(len(staged.blocks))]
        stored: dict[str, int] = {}
        for m in merged:
            for name, n in m.stored.items():
                stored[name] = stored.get(name, 0) + n
        rows = pa.concat_tables([m.table for m in merged]).select(["ts_event", "symbol", "price"])
        out[session] = {
            "rows": [(r["ts_event"].value, r["symbol"], r["price"]) for r in rows.to_pylist()],
            "symbols": [s for m in merged for s in m.symbols.to_pylist()],
            "stored": stored,
            "duplicates": sorted(
                (d["source"], d["row"])
                for m in merged
                if m.duplicates is not None
                for d in m.duplicates.to_pylist()
            ),
        }
    return out


def _reference(files: dict[str, list[Batch]]) -> dict[str, Any]:
    """The merge, slowly: each day's rows sorted by (symbol, ts, file, row); a row equal
    to an earlier one in every column is a duplicate."""
    days: dict[str, list[tuple[str, int, int, str, float]]] = {}
    for name, batches in files.items():
        for row, (ts, symbol, price) in enumerate(r for b in batches for r in b):
            day = np.datetime64(ts // DAY_NS, "D").astype(str)
            days.setdefault(day, []).append((symbol, ts, row, name, price))
    out = {}
    for day, rows in days.items():
        seen, kept, duplicates = set(), [], []
        for symbol, ts, row, name, price in sorted(rows, key=lambda r: (r[0], r[1], r[3], r[2])):
            if (ts, symbol, price) in seen:
                duplicates.append((name, row))
                continue
            seen.add((ts, symbol, price))
            kept.append((ts, symbol, price, name))
        stored: dict[str, int] = {}
        for *_, name in kept:
            stored[name] = stored.get(name, 0) + 1
        out[day] = {
            "rows": [r[:3] for r in kept],
            "symbols": [r[1] for r in kept],
            "stored": stored,
            "duplicates": sorted(duplicates),
        }
    return out


_rows = st.tuples(
    st.sampled_from([T0, T0 + 1, T0 + 2, T0 + DAY_NS]),
    st.sampled_from(["A", "B", "C", "D"]),
    st.sampled_from([1.0, 2.0]),
)
_files = st.dictionaries(
    st.sampled_from(FILES),
    st.lists(st.lists(_rows, min_size=1, max_size=12), min_size=1, max_size=3),
    min_size=1,
)


@settings(max_examples=60, deadline=None)
@given(_files, st.integers(1, 8))
def test_a_merge_of_parts_in_memory_or_on_disk_matches_the_reference(
    files: dict[str, list[Batch]], block_rows: int
) -> None:
    expected = _reference(files)
    with tempfile.TemporaryDirectory() as tmp:
        for memory_bytes in (1 << 30, 0):
            staging = Staging(Location(str(Path(tmp) / str(memory_bytes))), "job", memory_bytes)
            assert _merged(staging, _stage(staging, files), block_rows) == expected


def test_a_batch_of_one_day_is_staged_whole_in_file_order(tmp_path: Path) -> None:
    staging = Staging(Location(str(tmp_path)), "job", 1 << 30)
    batch = [(T0 + 2, "B", 1.0), (T0, "A", 1.0), (T0 + 1, "B", 2.0)]
    [(session, _, rel)] = _stage(staging, {"a.csv": [batch]})
    part = staging.read([rel])
    assert session == "2024-01-02"
    assert part.column("symbol").to_pylist() == ["B", "A", "B"]
    assert part.column("_row").to_pylist() == [0, 1, 2]
    assert pa.types.is_dictionary(part.column("symbol").type)


def test_a_batch_of_two_days_out_of_order_splits_by_day_in_file_order(tmp_path: Path) -> None:
    staging = Staging(Location(str(tmp_path)), "job", 1 << 30)
    batch = [(T0 + DAY_NS, "A", 1.0), (T0, "B", 1.0), (T0 + DAY_NS + 1, "B", 1.0), (T0, "A", 2.0)]
    parts = _stage(staging, {"a.csv": [batch]})
    rows = {session: staging.read([rel]).column("_row").to_pylist() for session, _, rel in parts}
    assert rows == {"2024-01-02": [1, 3], "2024-01-03": [0, 2]}


def test_a_session_lets_go_of_the_parts_it_holds(tmp_path: Path) -> None:
    staging = Staging(Location(str(tmp_path)), "job", 1 << 30)
    parts = _stage(staging, {"a.csv": [[(T0, "A", 1.0)]], "b.csv": [[(T0, "B", 1.0)]]})
    [kinds] = group_parts(parts).values()
    assert staging.held(kinds[EventKind.TRADES])
    session = StagedSession(staging, kinds, 1 << 18)
    assert not staging.held(kinds[EventKind.TRADES][:1])
    assert session.merge(EventKind.TRADES, 0, False).stored == {"a.csv": 1, "b.csv": 1}
