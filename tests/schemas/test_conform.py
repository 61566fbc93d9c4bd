"""Null columns: the columns a file does not have, shared instead of made per batch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ticktensor.schemas import null_column


@pytest.mark.parametrize("rows", [0, 1, 3, 1000, (1 << 20) + 1])
@pytest.mark.parametrize("type_", [pa.string(), pa.uint64(), pa.timestamp("ns", tz="UTC")])
def test_null_columns_equal_fresh_nulls(rows: int, type_: pa.DataType) -> None:
    column = null_column(rows, type_)
    assert column.equals(pa.nulls(rows, type_))
    assert column.null_count == rows
    assert column.type == type_
