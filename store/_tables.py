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

__all__ = ["encode_table", "read_table", "table_path", "write_table"]


def _ts_range(table: pa.Table) -> tuple[int | None, int | None]:
    if "ts_event" not in table.column_names or table.num_rows == 0:
        return None, None
    col = table.column("ts_event")
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.int64())
    mm = pc.min_max(col).as_py()
    return mm["min"], mm["max"]


#: Rows per row group of a table of one symbol (few row groups: fast full scans).
ROW_GROUP_ROWS = 1 << 20
#: Rows per row group of a table of every symbol of a session (``ALL_SYMBOLS``): its rows
#: are sorted by symbol, so each row group's min/max ``symbol`` statistics let a reader
#: (pyarrow, polars, duckdb) skip every group without the symbols it wants. 65,536 rows
#: cost no more to write than 1 M-row groups (2 M trades: 0.14 s either way).
SESSION_ROW_GROUP_ROWS = 1 << 16


def encode_table(table: pa.Table, row_group_rows: int = ROW_GROUP_ROWS) -> bytes:
    """The Parquet bytes stored for ``table`` (zstd; deterministic for equal tables)."""
    buf = io.BytesIO()
    # Dictionary pages only for text columns: numeric columns rarely repeat enough to
    # gain, and skipping them makes writing about 30% faster.
    text = [
        f.name
        for f in table.schema
        if pa.types.is_string(f.type)
        or pa.types.is_large_string(f.type)
        or pa.types.is_dictionary(f.type)
    ]
    pq.write_table(
        table, buf, compression="zstd", row_group_size=row_group_rows, use_dictionary=text or False
    )
    return buf.getvalue()


def table_path(kind: str, symbol: str, session: str, data: bytes) -> str:
    """Where a table with Parquet bytes ``data`` is stored (named by its content hash)."""
    if not kind or "/" in kind:
        raise SchemaError(f"table kind must be a plain name, got {kind!r}")
    digest = sha256_hex(data)[:16]
    return f"events/{kind}/{safe_component(symbol)}/{safe_component(session)}-{digest}.parquet"


def write_table(
    location: Location,
    *,
    kind: str,
    symbol: str,
    session: str,
    table: pa.Table,
    data: bytes,
    sources: Sequence[SourceFile] = (),
) -> TableRecord:
    """Store ``data`` (``encode_table(table)``) and return the table's record."""
    rel = table_path(kind, symbol, session, data)
    location.write_atomic(rel, data, durable=False)  # the commit flushes it (Location.flush)
    start, end = _ts_range(table)
    return TableRecord(
        kind=kind,
        symbol=symbol,
        session=session,
        path=rel,
        rows=table.num_rows,
        ts_start=start,
        ts_end=end,
        file=FileEntry(sha256_hex(data), len(data)),
        sources=tuple(sources),
    )


def read_table(location: Location, record: TableRecord) -> pa.Table:
    """Read a stored event table back as an Arrow table."""
    where = (
        f"{record.kind} table {record.symbol}/{record.session} ({location.display(record.path)})"
    )
    location.check_inside(record.path)
    try:
        data = location.read_bytes(record.path)
    except FileNotFoundError as exc:
        raise StoreCorruptError(f"{where}: table file is missing") from exc
    if len(data) != record.file.bytes or sha256_hex(data) != record.file.sha256:
        raise StoreCorruptError(
            f"{where}: content hash mismatch (manifest sha256 {record.file.sha256[:16]}..., "
            f"{record.file.bytes} bytes; stored {sha256_hex(data)[:16]}..., {len(data)} bytes)"
        )
    try:
        return pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise StoreCorruptError(f"{where}: not a readable Parquet file ({exc})") from exc
