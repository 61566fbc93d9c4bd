"""A stored table reads back as ``pq.read_table`` reads its bytes: same values, schema and
metadata, and the same chunks per column (the merge and the writers see one layout)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.store._tables import _parquet_table


def _table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    symbols = np.sort(rng.integers(0, 5, rows))
    return pa.table(
        {
            "ts_event": pa.array(np.arange(rows), pa.timestamp("ns", tz="UTC")),
            "symbol": pa.array([f"S{s}" for s in symbols], pa.string()).dictionary_encode(),
            "price": rng.normal(100, 1, rows),
            "venue": pa.array([None if i % 3 else "X" for i in range(rows)], pa.string()),
            "count": pa.array(rng.integers(0, 9, rows), pa.uint64()),
        }
    ).replace_schema_metadata({"ticktensor.kind": "trades"})


def _check(rows: int, row_group_rows: int, seed: int = 0) -> None:
    buf = io.BytesIO()
    pq.write_table(_table(rows, seed), buf, row_group_size=row_group_rows, compression="zstd")
    data = buf.getvalue()
    want = pq.read_table(io.BytesIO(data))
    got = _parquet_table(data)
    assert got.equals(want)
    assert got.schema.equals(want.schema, check_metadata=True)
    assert [c.num_chunks for c in got.columns] == [c.num_chunks for c in want.columns]
    assert [[len(k) for k in c.chunks] for c in got.columns] == [
        [len(k) for k in c.chunks] for c in want.columns
    ]


@pytest.mark.parametrize("rows", [0, 1, 5_000, 1 << 16, 1 << 17, (1 << 17) + 1, 200_000])
@pytest.mark.parametrize("row_group_rows", [1 << 16, 1 << 20])
def test_read_table_as_pyarrow_reads_it(rows: int, row_group_rows: int) -> None:
    _check(rows, row_group_rows)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 3_000), row_group_rows=st.integers(1, 4_000), seed=st.integers(0, 9))
def test_read_table_small_files(rows: int, row_group_rows: int, seed: int) -> None:
    _check(rows, row_group_rows, seed)
