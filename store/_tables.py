"""Event tables: immutable Parquet files (zstd) of one event kind, symbol and session."""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Callable, Sequence
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ticktensor.errors import SchemaError, StoreCorruptError

from ._location import Location, safe_component, start_writeback
from ._manifest import FileEntry, SourceFile, TableRecord, sha256_hex

__all__ = ["TableEncoder", "read_table", "table_path", "write_table"]


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


class TableEncoder:
    """A table's stored Parquet bytes, encoded as its rows come a part at a time.

    The parts' rows are cut into row groups of ``row_group_rows`` as one table's would
    be (a part's rows short of a whole row group wait for the next part), so the bytes
    equal those of the parts concatenated, given at once: a session's table can be
    encoded while its later blocks are still being merged. Given a local ``location``,
    the bytes go to a working file in its ``events/`` folder (``rel``), which
    :meth:`Store.write_encoded_table` moves into place, instead of growing in memory;
    :meth:`close` removes it when the table is not written. The working file is hashed
    as it grows (its new bytes read back after each row group), so that writing the
    table need not read it whole once it is finished: :attr:`sha256`.
    """

    def __init__(
        self, row_group_rows: int = ROW_GROUP_ROWS, *, location: Location | None = None
    ) -> None:
        self.row_group_rows = row_group_rows
        self.rows = 0
        self.ts_range: tuple[int | None, int | None] = (None, None)
        self.location = location if location is not None and location.is_local else None
        self.rel = f"events/{uuid.uuid4().hex}.writing.parquet" if self.location else None
        self._sink: pa.NativeFile | None = None
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self._pending: pa.Table | None = None
        self._digest = hashlib.sha256()
        self._written: BinaryIO | None = None  # the working file, read back to hash
        #: The working file's sha256, once :meth:`finish` wrote it (None: bytes returned).
        self.sha256: str | None = None

    def append(self, table: pa.Table) -> None:
        """Encode the row groups ``table``'s rows complete (the rest wait for more)."""
        if self._schema is None:
            self._schema = table.schema
            # Dictionary pages only for text columns: numeric columns rarely repeat
            # enough to gain, and skipping them makes writing about 30% faster.
            text = [
                f.name
                for f in table.schema
                if pa.types.is_string(f.type)
                or pa.types.is_large_string(f.type)
                or pa.types.is_dictionary(f.type)
            ]
            # Statistics for the sort keys only: a row group's min/max of symbol and time
            # let readers skip it; those of prices and sizes over a range of symbols do not
            # (and skipping them writes a session's table about 15% faster).
            keys = [n for n in ("symbol", "ts_event", "ts_recv") if n in table.schema.names]
            self._sink = self._open()
            # The writer's constructor writes the 'PAR1' header: a full disk there is
            # an error naming the working file, like every later write.
            with self._writing():
                self._writer = pq.ParquetWriter(
                    self._sink,
                    table.schema,
                    compression="zstd",
                    use_dictionary=text or False,
                    write_statistics=keys or False,
                    # Values handed to each column's encoder at a time: more than the default
                    # 1,024 halves the per-batch work of columns without values (about 6%
                    # faster for W1's table, which lacks four of its nine columns).
                    write_batch_size=8192,
                )
        elif table.schema != self._schema:
            raise SchemaError(f"table part's schema {table.schema} is not {self._schema}")
        if table.num_rows == 0:
            return
        self.rows += table.num_rows
        self.ts_range = _merged_range(self.ts_range, _ts_range(table))
        pending = table if self._pending is None else pa.concat_tables([self._pending, table])
        whole = pending.num_rows - pending.num_rows % self.row_group_rows
        if whole:
            self._write(pending.slice(0, whole))
        self._pending = pending.slice(whole) if whole < pending.num_rows else None

    def finish(self) -> pa.Buffer | None:
        """Write the last (partial) row group and the footer: the Parquet bytes, or
        None when they went to the working file ``rel``."""
        if self._writer is None or self._schema is None or self._sink is None:
            raise ValueError("a table needs at least one part (its schema) to be encoded")
        if self._pending is not None:
            self._write(self._pending)
        elif self.rows == 0:
            self._write(self._schema.empty_table())  # one empty row group, as pyarrow writes
        with self._writing():
            self._writer.close()
            if isinstance(self._sink, pa.BufferOutputStream):
                return self._sink.getvalue()
            self._sink.close()
            self._hash_written()
        assert self._written is not None  # opened by the first row group
        self._written.close()
        self.sha256 = self._digest.hexdigest()
        return None

    def close(self) -> None:
        """Remove the working file of a table that is not written (nothing once moved)."""
        # The table is dropped: a failing write (a full disk) need not fail again here.
        with contextlib.suppress(OSError):
            if self._writer is not None and self._writer.is_open:
                self._writer.close()
        with contextlib.suppress(OSError):
            if self._sink is not None and not self._sink.closed:
                self._sink.close()
        if self._written is not None:
            self._written.close()
        if self.location is not None and self.rel is not None:
            self.location.remove_tree(self.rel)

    def _open(self) -> pa.NativeFile:
        if self.location is None or self.rel is None:
            return pa.BufferOutputStream()
        return pa.OSFile(self.location.create_local(self.rel), "wb")

    def _write(self, table: pa.Table) -> None:
        assert self._writer is not None  # set by the first append
        with self._writing():
            self._writer.write_table(table, row_group_size=self.row_group_rows)
            self._hash_written()

    def _hash_written(self) -> None:
        """Hash the working file's bytes written since the last call (no file: nothing)."""
        if self.location is None or self.rel is None:
            return
        if self._written is None:
            self._written = open(self.location.path(self.rel), "rb")  # noqa: SIM115
        while chunk := self._written.read(1 << 20):
            self._digest.update(chunk)
        start_writeback(self._written.fileno())  # the commit's flush then has less to do

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        """Errors of writing the working file name it."""
        if self.location is None or self.rel is None:
            return contextlib.nullcontext()
        return self.location.writing(self.rel)


def _merged_range(
    a: tuple[int | None, int | None], b: tuple[int | None, int | None]
) -> tuple[int | None, int | None]:
    """The smallest range holding both ranges (``None`` ends: no rows)."""
    if a[0] is None or a[1] is None:
        return b
    if b[0] is None or b[1] is None:
        return a
    return min(a[0], b[0]), max(a[1], b[1])


def table_path(kind: str, symbol: str, session: str, digest: str) -> str:
    """Where a table whose Parquet bytes have sha256 ``digest`` is stored."""
    if not kind or "/" in kind:
        raise SchemaError(f"table kind must be a plain name, got {kind!r}")
    return f"events/{kind}/{safe_component(symbol)}/{safe_component(session)}-{digest[:16]}.parquet"


def write_table(
    location: Location,
    *,
    kind: str,
    symbol: str,
    session: str,
    encoder: TableEncoder,
    data: pa.Buffer | None,
    sources: Sequence[SourceFile] = (),
    published: Callable[[str], TableRecord | None] | None = None,
) -> TableRecord:
    """Store the table ``encoder`` encoded (``data``, what its :meth:`TableEncoder.finish`
    returned: its bytes, or None when they are in its working file) and return its
    record; ``published(path)`` returns the latest version's record at the table's path,
    if any: then nothing is written and it is returned."""
    if data is None:
        # The bytes are in the encoder's working file, hashed as it grew.
        assert encoder.rel is not None
        assert encoder.sha256 is not None
        digest, size = encoder.sha256, location.size(encoder.rel)
    else:
        digest, size = sha256_hex(memoryview(data)), data.size
    rel = table_path(kind, symbol, session, digest)
    found = None if published is None else published(rel)
    if found is not None:
        encoder.close()
        return found
    if data is None:
        assert encoder.rel is not None
        location.move_content_addressed(encoder.rel, rel, digest, exists=True)
    else:
        location.write_atomic(rel, memoryview(data), durable=False)  # the commit flushes it
    start, end = encoder.ts_range
    return TableRecord(
        kind=kind,
        symbol=symbol,
        session=session,
        path=rel,
        rows=encoder.rows,
        ts_start=start,
        ts_end=end,
        file=FileEntry(digest, size),
        sources=tuple(sources),
    )


def read_table(location: Location, record: TableRecord) -> pa.Table:
    """Read a stored event table back as an Arrow table."""
    where = (
        f"{record.kind} table {record.symbol}/{record.session} ({location.display(record.path)})"
    )
    location.refuse_links(record.path)
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
        return _parquet_table(data)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise StoreCorruptError(f"{where}: not a readable Parquet file ({exc})") from exc


#: Rows pyarrow's dataset reader (``pq.read_table``) hands out per chunk.
_DATASET_BATCH_ROWS = 1 << 17


def _parquet_table(data: bytes) -> pa.Table:
    """The table of the Parquet bytes ``data``, chunked as ``pq.read_table`` chunks it.

    A file of one row group of at most a dataset batch of rows (a partition of daily
    bars, a small session) is read by ``ParquetFile`` on this thread, without the dataset
    layer ``pq.read_table`` adds (about 0.5 ms a call) or a wake-up of pyarrow's pool;
    the two give the same table, each column in one chunk. Other files (several row
    groups, more rows, none) are read by ``pq.read_table``, whose chunks follow its row
    groups and batches.
    """
    file = pq.ParquetFile(pa.BufferReader(data))
    meta = file.metadata
    if meta.num_row_groups == 1 and 0 < meta.num_rows <= _DATASET_BATCH_ROWS:
        return file.read(use_threads=False)
    return pq.read_table(pa.BufferReader(data))
