"""Typed tabular inputs (Parquet, Arrow): record batches mapped onto a canonical schema."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa

from ticktensor.errors import ConfigError, InputError, TickTensorError
from ticktensor.ingest._sources import Input
from ticktensor.schemas import EventKind

from ._bar_grid import BarGrid
from ._base import EventBatch, ReadOptions
from ._columns import ColumnPlan, convert, plan_columns, resolve_time
from ._names import kind_from_columns
from ._rejects import table_rejects

__all__ = ["decode_batches", "guard", "kind_of"]

_KIND_KEY = b"ticktensor.kind"


def kind_of(source: Input, options: ReadOptions, schema: pa.Schema) -> EventKind:
    """``options.kind``, else the kind a ticktensor-written file records in its metadata,
    else the kind its column names describe (``bid``/``ask`` -> quotes, ...)."""
    if options.kind is not None:
        return options.kind
    recorded = (schema.metadata or {}).get(_KIND_KEY)
    if recorded is not None:
        try:
            return EventKind(recorded.decode())
        except (UnicodeDecodeError, ValueError):
            raise ConfigError(
                f"{source.url}: metadata {_KIND_KEY.decode()} = {recorded[:40]!r} is not an "
                "event kind; pass --schema"
            ) from None
    if (kind := kind_from_columns(schema.names, options.csv.columns)) is not None:
        return kind
    kinds = ", ".join(k.value for k in EventKind)
    raise ConfigError(
        f"{source.url}: cannot tell the event kind from the columns {schema.names}; "
        f"pass --schema: one of {kinds}"
    )


def _first_value(batch: pa.RecordBatch, column: str | None) -> object:
    if column is None or column not in batch.schema.names:
        return None
    values = batch.column(column).drop_null()
    return values[0].as_py() if len(values) else None


def _resolve(plan: ColumnPlan, batch: pa.RecordBatch) -> ColumnPlan:
    """``plan`` with its time reading fixed from ``batch`` (a file's first non-empty one)."""
    column = plan.sources.get("ts_event")
    if column is None or pa.types.is_timestamp(batch.schema.field(column).type):
        return plan
    return resolve_time(plan, _first_value(batch, column), _first_value(batch, plan.ts_time))


def decode_batches(
    source: Input,
    options: ReadOptions,
    schema: pa.Schema,
    batches: Callable[[Sequence[str]], Iterator[pa.RecordBatch]],
) -> Iterator[EventBatch]:
    """Map each record batch of ``batches(columns)`` onto the canonical schema.

    Rows are numbered by record, from 1. A value that does not convert makes its row a
    reject whose ``raw`` is the source record as JSON; decoded rows carry no raw text.
    """
    kind = kind_of(source, options, schema)
    plan = plan_columns(kind, schema.names, options, source.name)
    grid = BarGrid(plan, source.url) if plan.bar_interval_open else None
    announced = False
    start = 1
    for number, batch in enumerate(batches(plan.file_columns), 1):
        if plan.time is None and batch.num_rows:
            plan = _resolve(plan, batch)
        try:  # IPC and Parquet buffers are not checked on read: corrupt ones can crash compute
            batch.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise InputError(f"{source.url}: record batch {number} is corrupt ({exc})") from None
        table = pa.Table.from_batches([batch])
        rows = np.arange(start, start + table.num_rows, dtype=np.int64)
        start += table.num_rows
        canonical, bads = convert(table, plan)
        if grid is not None and canonical.num_rows:
            canonical, off_grid = grid.apply(canonical, plan.sources["ts_event"])
            bads += [off_grid] if off_grid is not None else []
        rejects, keep = table_rejects(source.url, bads, rows, table)
        if keep is not None:
            canonical = canonical.filter(pa.array(keep))
            rows = rows[keep]
        inference = None
        if not announced and (canonical.num_rows or rejects.num_rows):
            announced = True
            inference = plan.inference(*([grid.note] if grid and grid.note else []))
        yield EventBatch(kind, canonical, rows, rejects=rejects, inference=inference)


_T = TypeVar("_T")


def guard(url: str, what: str, items: Iterator[_T]) -> Iterator[_T]:
    """``items``, with pyarrow's decoding errors raised as :class:`InputError` naming ``url``.

    pyarrow reports a corrupt footer, Thrift header or IPC message as ``ArrowInvalid``,
    ``OSError``, ``UnicodeDecodeError`` or (a declared size past memory) ``MemoryError``;
    for an input file each means "not a readable ``what`` file", which the job reports
    with the file's name.
    """
    try:
        yield from items
    except TickTensorError:
        raise
    except (pa.ArrowException, OSError, UnicodeDecodeError, MemoryError) as exc:
        # MemoryError: a corrupt header declared a buffer larger than memory.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{url}: not a readable {what} file ({reason})") from exc
