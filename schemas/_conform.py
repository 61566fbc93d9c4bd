"""Conforming: cast a normalized table to its canonical event schema, or say what is wrong."""

from __future__ import annotations

import functools
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import SchemaError

from ._events import EventKind, event_kind, schema_for

__all__ = ["cast_columns", "conform", "null_column"]

#: Rows up to which :func:`null_column` hands out slices of one array per type.
_SHARED_NULL_ROWS = 1 << 20


def null_column(rows: int, type_: pa.DataType) -> pa.Array:
    """``rows`` nulls of ``type_``: a slice of one shared array (arrays are immutable) up
    to :data:`_SHARED_NULL_ROWS` rows, so that the columns a file does not have cost no
    fresh memory per batch and block."""
    if rows > _SHARED_NULL_ROWS:
        return pa.nulls(rows, type_)
    return _null_array(type_, 1 << max(rows - 1, 0).bit_length()).slice(0, rows)


@functools.lru_cache(maxsize=32)
def _null_array(type_: pa.DataType, rows: int) -> pa.Array:
    return pa.nulls(rows, type_)


def cast_columns(
    table: pa.Table, kind: EventKind | str, *, extra: Literal["drop", "error"] = "drop"
) -> pa.Table:
    """Cast ``table`` to the canonical column names, order and types of ``kind``.

    Unlike :func:`conform`, nulls in required columns are kept (the fields stay
    nullable), so the validator can report them row by row.
    """
    schema = schema_for(kind)
    name = event_kind(kind).value
    present = set(table.column_names)
    if extra == "error" and (unknown := sorted(present - set(schema.names))):
        raise SchemaError(
            f"{name} table has columns not in the {name} schema: {', '.join(unknown)}"
        )
    columns: list[pa.ChunkedArray] = []
    for field in schema:
        if field.name not in present:
            if not field.nullable:
                raise SchemaError(
                    f"{name} table is missing required column {field.name!r} "
                    f"(expected {field.type}); got columns {table.column_names}"
                )
            columns.append(pa.chunked_array([null_column(table.num_rows, field.type)]))
            continue
        column = table.column(field.name)
        try:
            columns.append(pc.cast(column, field.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(
                f"{name} column {field.name!r}: expected {field.type}, got {column.type} "
                f"which does not cast safely ({exc})"
            ) from None
    fields = [field.with_nullable(True) for field in schema]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=schema.metadata))


def conform(
    table: pa.Table, kind: EventKind | str, *, extra: Literal["drop", "error"] = "drop"
) -> pa.Table:
    """Return ``table`` cast to the canonical schema of ``kind``.

    Columns come out in canonical order with canonical types; missing nullable
    columns are filled with nulls; columns the schema does not know are dropped
    (``extra="drop"``) or rejected (``extra="error"``). Naive timestamps are taken
    as UTC; integers given for timestamps are taken as nanoseconds.

    Parameters
    ----------
    table
        A table whose column names already follow the canonical schema.
    kind
        The event kind to conform to.
    extra
        What to do with columns outside the schema.

    Returns
    -------
    pyarrow.Table
        A table whose schema equals ``schema_for(kind)``, metadata included.

    Raises
    ------
    SchemaError
        Naming the column and the expected vs. actual type when a required column
        is missing, a column does not cast safely, or a required column holds nulls
        (run :func:`validate` first to find and quarantine such rows).

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"ts_event": [1], "symbol": ["X"], "price": [1.5], "size": [2],
    ...               "side": [1]})
    >>> conform(t, "trades").schema.field("size").type
    DataType(double)
    """
    cast = cast_columns(table, kind, extra=extra)
    schema = schema_for(kind)
    for field in schema:
        column = cast.column(field.name)
        if not field.nullable and column.null_count:
            first = pc.index(pc.is_null(column), True).as_py()
            raise SchemaError(
                f"{event_kind(kind).value} column {field.name!r} is required but holds "
                f"{column.null_count} null(s), first at row {first}"
            )
    return cast.cast(schema)
