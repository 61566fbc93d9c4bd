"""A table encoded a part at a time is stored byte for byte as the whole table would be."""

from __future__ import annotations

import hashlib
import io
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import SchemaError
from ticktensor.store import ALL_SYMBOLS, Store, TableEncoder


def _trades(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    symbols = np.sort(rng.integers(0, 40, rows))
    return pa.table(
        {
            "ts_event": pa.array(1_700_000_000_000_000_000 + np.arange(rows), pa.int64()),
            "symbol": pa.array([f"S{s:02d}" for s in symbols], pa.string()),
            "price": rng.normal(100, 1, rows),
            "size": rng.integers(1, 100, rows).astype(np.float64),
            "venue": pa.nulls(rows, pa.string()),
        }
    )


def _whole(table: pa.Table, row_group_rows: int) -> bytes:
    """The reference: pyarrow's own writer given the whole table at once."""
    buf = io.BytesIO()
    pq.write_table(
        table,
        buf,
        compression="zstd",
        row_group_size=row_group_rows,
        use_dictionary=["symbol", "venue"],
        write_statistics=["symbol", "ts_event"],
    )
    return buf.getvalue()


def _in_parts(table: pa.Table, cuts: list[int], row_group_rows: int) -> TableEncoder:
    encoder = TableEncoder(row_group_rows)
    bounds = [0, *sorted(min(c, table.num_rows) for c in cuts), table.num_rows]
    for lo, hi in itertools.pairwise(bounds):
        encoder.append(table.slice(lo, hi - lo))
    return encoder


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(0, 3_000),
    cuts=st.lists(st.integers(0, 3_000), max_size=6),
    row_group_rows=st.sampled_from([1, 7, 512, 1_000, 4_096]),
)
def test_parts_encode_to_the_whole_tables_bytes(
    rows: int, cuts: list[int], row_group_rows: int
) -> None:
    table = _trades(rows)
    encoder = _in_parts(table, cuts, row_group_rows)
    assert bytes(encoder.finish()) == _whole(table, row_group_rows)
    assert encoder.rows == rows


def test_row_groups_are_whole_across_parts() -> None:
    table = _trades(2_500)
    data = _in_parts(table, [1, 999, 1_001, 2_400], 1_000).finish()
    meta = pq.ParquetFile(io.BytesIO(memoryview(data))).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1_000, 1_000, 500]
    assert pq.read_table(io.BytesIO(memoryview(data))).equals(table)


def test_the_time_range_spans_every_part() -> None:
    table = _trades(100)
    encoder = _in_parts(table, [10, 60], 1_000)
    assert encoder.ts_range == (1_700_000_000_000_000_000, 1_700_000_000_000_000_099)
    empty = TableEncoder()
    empty.append(table.slice(0, 0))
    assert empty.ts_range == (None, None)


def test_a_part_of_another_schema_is_refused() -> None:
    encoder = TableEncoder()
    encoder.append(_trades(5))
    with pytest.raises(SchemaError, match="schema"):
        encoder.append(_trades(5).drop_columns(["venue"]))


def test_an_encoder_without_parts_has_no_schema() -> None:
    with pytest.raises(ValueError, match="at least one part"):
        TableEncoder().finish()


def test_the_store_writes_an_encoded_table_as_it_writes_the_table(tmp_path: Path) -> None:
    table = _trades(70_000)
    one = Store.create(str(tmp_path / "one"))
    whole = one.write_table(kind="trades", symbol=ALL_SYMBOLS, session="2024-01-02", table=table)
    two = Store.create(str(tmp_path / "two"))
    encoder = two.table_encoder(ALL_SYMBOLS)
    for lo in range(0, table.num_rows, 30_000):
        encoder.append(table.slice(lo, 30_000))
    parts = two.write_encoded_table(
        kind="trades", symbol=ALL_SYMBOLS, session="2024-01-02", encoder=encoder
    )
    assert parts == whole
    written = (tmp_path / "two" / parts.path).read_bytes()
    assert written == (tmp_path / "one" / whole.path).read_bytes()


def test_a_local_store_encodes_to_a_working_file_moved_into_place(tmp_path: Path) -> None:
    table = _trades(70_000)
    store = Store.create(str(tmp_path / "s"))
    encoder = store.table_encoder(ALL_SYMBOLS)
    encoder.append(table)
    assert encoder.rel is not None
    assert (tmp_path / "s" / encoder.rel).exists()  # the row groups so far, on disk
    record = store.write_encoded_table(
        kind="trades", symbol=ALL_SYMBOLS, session="2024-01-02", encoder=encoder
    )
    written = (tmp_path / "s" / record.path).read_bytes()
    assert record.file.sha256 == hashlib.sha256(written).hexdigest()  # hashed as it grew
    in_memory = TableEncoder(1 << 16)
    in_memory.append(table)
    data = in_memory.finish()
    assert data is not None  # no location: the bytes stay in memory
    assert written == bytes(data)
    assert not list((tmp_path / "s" / "events").glob("*.writing.parquet"))


def test_an_encoder_closed_unwritten_leaves_nothing(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    encoder = store.table_encoder(ALL_SYMBOLS)
    encoder.append(_trades(70_000))
    encoder.close()
    assert not list((tmp_path / "s" / "events").glob("*.writing.parquet"))


def test_only_the_sort_keys_carry_row_group_statistics() -> None:
    encoder = TableEncoder(100)
    encoder.append(_trades(250))
    meta = pq.ParquetFile(io.BytesIO(bytes(encoder.finish()))).metadata
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        with_stats = {
            group.column(i).path_in_schema
            for i in range(meta.num_columns)
            if group.column(i).is_stats_set
        }
        assert with_stats == {"symbol", "ts_event"}
