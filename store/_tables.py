"""Event tables: immutable Parquet files (zstd) of one event kind, symbol and session."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ticktensor.errors import SchemaError, StoreCorruptError

from ._location import Location, safe_component
from ._manifest import FileEntry, SourceFile, TableRecord, sha256_hex

__all__ = ["read_table", "write_table"]


def _ts_range(table: pa.Table) -> tuple[int | None, int | None]:
    if "ts_event" not in table.column_names or table.num_rows == 0:
        return None, None
    col = table.column("ts_event")
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.int64())
    mm = pc.min_max(col).as_py()
    return mm["min"], mm["max"]


def write_table(
    location: Location,
    *,
    kind: str,
    symbol: str,
    session: str,
    table: pa.Table,
    sources: Sequence[SourceFile] = (),
) -> TableRecord:
    """Write ``table`` as one Parquet file named by its content hash and return its record."""
    if not kind or "/" in kind:
        raise SchemaError(f"table kind must be a plain name, got {kind!r}")
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", row_group_size=1 << 20)
    data = buf.getvalue()
    digest = sha256_hex(data)
    rel = f"events/{kind}/{safe_component(symbol)}/{safe_component(session)}-{digest[:16]}.parquet"
    location.write_atomic(rel, data)
    start, end = _ts_range(table)
    return TableRecord(
        kind=kind,
        symbol=symbol,
        session=session,
        path=rel,
        rows=table.num_rows,
        ts_start=start,
        ts_end=end,
        file=FileEntry(digest, len(data)),
        sources=tuple(sources),
    )


def read_table(location: Location, record: TableRecord) -> pa.Table:
    """Read a stored event table back as an Arrow table."""
    try:
        data = location.read_bytes(record.path)
    except FileNotFoundError as exc:
        raise StoreCorruptError(f"{location.display(record.path)}: table file is missing") from exc
    return pq.read_table(io.BytesIO(data))
