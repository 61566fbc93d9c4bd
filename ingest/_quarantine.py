"""Quarantine: rows that broke a rule, kept in the store with where they came from and why."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ValidationError
from ticktensor.schemas import RULES, ValidationResult

__all__ = [
    "QUARANTINE_SCHEMA",
    "first_messages",
    "from_rejects",
    "from_violations",
    "raise_first",
    "rows_as_json",
]

#: One row per broken rule (a row breaking two rules appears twice).
QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("row", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("column", pa.string()),
        pa.field("value", pa.string()),
        pa.field("message", pa.string(), nullable=False),
        pa.field("raw", pa.string()),
    ]
)


def rows_as_json(table: pa.Table, indices: npt.NDArray[np.int64]) -> list[str]:
    """The rows at ``indices`` rendered as JSON objects (the raw text of binary formats)."""
    if len(indices) == 0:
        return []
    taken = table.take(pa.array(indices))
    columns = {}
    for name, col in zip(taken.column_names, taken.columns, strict=True):
        plain = col.cast(pa.int64()) if pa.types.is_timestamp(col.type) else col
        columns[name] = plain.to_pylist()
    return [
        json.dumps({k: _jsonable(v[i]) for k, v in columns.items()}, allow_nan=True)
        for i in range(len(indices))
    ]


def _jsonable(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)


def from_violations(
    source: str,
    kind: str,
    table: pa.Table,
    result: ValidationResult,
    rows: npt.NDArray[np.int64],
    raw: pa.Array | None,
) -> pa.Table:
    """Quarantine entries for a validation result over ``table`` (batch indices -> source rows)."""
    v = result.violations
    if v.num_rows == 0:
        return QUARANTINE_SCHEMA.empty_table()
    idx = v.column("row").to_numpy().astype(np.int64)
    src_rows = rows[idx]
    if raw is not None:
        raw_text = raw.take(pa.array(idx)).cast(pa.string())
    else:
        uniq, inverse = np.unique(idx, return_inverse=True)
        rendered = rows_as_json(table, uniq)
        raw_text = pa.array([rendered[i] for i in inverse], pa.string())
    messages = [
        f"{source} row {r}: {m}"
        for r, m in zip(src_rows.tolist(), _strip_row(v.column("message").to_pylist()), strict=True)
    ]
    return pa.table(
        {
            "source": pa.array([source] * v.num_rows, pa.string()),
            "row": pa.array(src_rows, pa.int64()),
            "kind": pa.array([kind] * v.num_rows, pa.string()),
            "rule": v.column("rule").cast(pa.string()),
            "column": v.column("column").cast(pa.string()),
            "value": v.column("value").cast(pa.string()),
            "message": pa.array(messages, pa.string()),
            "raw": raw_text,
        },
        schema=QUARANTINE_SCHEMA,
    )


def _strip_row(messages: Sequence[str]) -> list[str]:
    # The validator says "row <batch index>: ..."; the quarantine names the source row.
    out = []
    for m in messages:
        head, sep, tail = m.partition(": ")
        out.append(tail if sep and head.startswith("row ") else m)
    return out


def from_rejects(source: str, kind: str, rejects: pa.Table) -> pa.Table:
    """Quarantine entries for rows a reader could not decode."""
    if rejects.num_rows == 0:
        return QUARANTINE_SCHEMA.empty_table()
    n = rejects.num_rows
    return pa.table(
        {
            "source": pa.array([source] * n, pa.string()),
            "row": rejects.column("row"),
            "kind": pa.array([kind] * n, pa.string()),
            "rule": rejects.column("rule"),
            "column": rejects.column("column"),
            "value": rejects.column("value"),
            "message": rejects.column("message"),
            "raw": rejects.column("raw"),
        },
        schema=QUARANTINE_SCHEMA,
    )


def raise_first(quarantine: pa.Table) -> None:
    """Strict mode: raise the first (lowest source row) entry as a ``ValidationError``."""
    if quarantine.num_rows == 0:
        return
    first = quarantine.take(pc.sort_indices(quarantine, [("row", "ascending")])[:1]).to_pylist()[0]
    rule = first["rule"]
    text = RULES.get(rule, "")
    raise ValidationError(
        f"{first['source']} row {first['row']}, column {first['column']}: value "
        f"{first['value']!s} breaks rule {rule}"
        + (f" ({text})" if text else "")
        + f"; raw: {first['raw']}"
    )


def first_messages(table: pa.Table) -> dict[str, str]:
    """The first message of each rule in a quarantine ``table`` (in its row order): what
    a report shows as the example of each reason."""
    rules = table.column("rule")
    messages = table.column("message")
    out: dict[str, str] = {}
    for rule in pc.unique(rules).to_pylist():
        index = pc.index(rules, rule).as_py()
        out[str(rule)] = str(messages[index].as_py())
    return out
