"""Reject rows: source rows that could not be decoded, with row number, rule and raw text."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pacsv

from ._base import REJECT_SCHEMA
from ._columns import Bad

__all__ = ["InvalidRows", "LineMismatchError", "Rejects", "table_rejects"]

#: ``(number among non-blank lines, 1-based; expected fields; actual fields)``
InvalidRows = list[tuple[int, int, int]]


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return str(value)


def _message(source: str, row: int, bad: Bad, value: str) -> str:
    return (
        f"{source} row {row}: column {bad.column!r} value {value!r} {bad.reason} (rule: {bad.rule})"
    )


def _count_newlines(buf: npt.NDArray[np.uint8]) -> int:
    """Newlines in ``buf``: numpy compares in slices of 4 MiB (little scratch memory) with
    the GIL released, 2-3x faster than ``bytes.count``, which holds the GIL throughout
    (the reading thread waits on it)."""
    step = 1 << 22
    return sum(int(np.count_nonzero(buf[i : i + step] == 10)) for i in range(0, len(buf), step))


class LineMismatchError(RuntimeError):
    """pyarrow's rows and our lines of a block do not line up (e.g. a lone ``\\r``)."""


class Rejects:
    """Rejects of one CSV block, and where the block's table rows sit among its lines."""

    def __init__(self, source: str, block: memoryview, first_row: int) -> None:
        self.source = source
        self.block = block
        self.first_row = first_row
        self.n_invalid = 0
        self.n_lines = 0
        self.records: list[dict[str, Any]] = []
        self._spans_cache: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None

    def invalid_row(self, row: pacsv.InvalidRow) -> str:
        """``invalid_row_handler`` for pyarrow: count the row and skip it."""
        self.n_invalid += 1
        return "skip"

    def spans(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Start and end (exclusive, before ``\\n``) byte offsets of each line of the block."""
        if self._spans_cache is None:
            self._spans_cache = self._compute_spans()
        return self._spans_cache

    def _compute_spans(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        buf = np.frombuffer(self.block, dtype=np.uint8)
        ends = np.flatnonzero(buf == 10).astype(np.int64)
        if bytes(self.block[-1:]) != b"\n":
            ends = np.append(ends, len(self.block))
        starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
        return starts, ends

    def line(self, index: int) -> str:
        """The text of 0-based line ``index`` of the block, without its line ending."""
        starts, ends = self.spans()
        text = bytes(self.block[starts[index] : ends[index]]).rstrip(b"\r")
        return text.decode("utf-8", errors="backslashreplace")

    def _has_blank_line(self, n_table: int) -> bool:
        # pyarrow skips empty lines, so the block has one iff it holds more lines than rows.
        buf = np.frombuffer(self.block, dtype=np.uint8)
        lines = _count_newlines(buf) + (0 if buf[-1:].tobytes() == b"\n" else 1)
        return lines > n_table

    def positions(
        self, n_table: int, recount: Callable[[memoryview], InvalidRows]
    ) -> npt.NDArray[np.int64]:
        """0-based line index within the block of each table row; sets ``n_lines``.

        Without invalid rows or blank lines (the fast path) row ``i`` is line ``i``;
        otherwise the lines are located and the invalid ones numbered by ``recount``.
        """
        if self.n_invalid == 0 and not self._has_blank_line(n_table):
            self.n_lines = n_table
            return np.arange(n_table, dtype=np.int64)
        starts, ends = self.spans()
        self.n_lines = len(starts)
        stripped = (
            ends - starts - (np.frombuffer(self.block, np.uint8)[np.maximum(ends - 1, 0)] == 13)
        )
        nonblank = np.flatnonzero(stripped > 0).astype(np.int64)
        invalid = recount(self.block) if self.n_invalid else []
        bad_lines = nonblank[[number - 1 for number, _, _ in invalid]]
        for line, (_, expected, actual) in zip(bad_lines.tolist(), invalid, strict=True):
            row = self.first_row + line
            message = (
                f"{self.source} row {row}: expected {expected} fields, got {actual} "
                "(rule: field_count)"
            )
            self.records.append(
                {"row": row, "rule": "field_count", "message": message, "raw": self.line(line)}
            )
        table_lines = np.setdiff1d(nonblank, bad_lines, assume_unique=True)
        if len(table_lines) != n_table:  # the caller parses the block line by line
            raise LineMismatchError(
                f"{self.source}: {n_table} rows parsed from {len(table_lines)} lines"
            )
        return table_lines

    def reject(self, row: int, rule: str, why: str, line: int) -> None:
        """Record that line ``line`` (row ``row``) was not decoded at all."""
        message = f"{self.source} row {row}: {why} (rule: {rule})"
        self.records.append({"row": row, "rule": rule, "message": message, "raw": self.line(line)})

    def add_bad(
        self, bads: Sequence[Bad], positions: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_] | None:
        """Record one reject per bad field; return the mask of rows to keep (or None)."""
        if not bads:
            return None
        drop = np.zeros(len(positions), dtype=bool)
        for bad in bads:
            index = np.flatnonzero(bad.mask)
            values = bad.values.take(pa.array(index)).to_pylist()
            for i, value in zip(index.tolist(), values, strict=True):
                row = self.first_row + int(positions[i])
                text = _text(value)
                self.records.append(
                    {
                        "row": row,
                        "column": bad.column,
                        "value": text,
                        "rule": bad.rule,
                        "message": _message(self.source, row, bad, text),
                        "raw": self.line(int(positions[i])),
                    }
                )
            drop |= bad.mask
        return ~drop

    def table(self) -> pa.Table:
        """The rejects in ``REJECT_SCHEMA``, sorted by row."""
        records = sorted(self.records, key=lambda r: r["row"])
        return pa.Table.from_pylist(records, schema=REJECT_SCHEMA)


def table_rejects(
    source: str, bads: Sequence[Bad], rows: npt.NDArray[np.int64], raw: pa.Table
) -> tuple[pa.Table, npt.NDArray[np.bool_] | None]:
    """Rejects of a binary tabular batch (raw text: the source record as JSON)."""
    if not bads:
        return REJECT_SCHEMA.empty_table(), None
    records: list[dict[str, Any]] = []
    drop = np.zeros(len(rows), dtype=bool)
    for bad in bads:
        index = np.flatnonzero(bad.mask)
        values = bad.values.take(pa.array(index)).to_pylist()
        originals = raw.take(pa.array(index)).to_pylist()
        for i, value, original in zip(index.tolist(), values, originals, strict=True):
            row = int(rows[i])
            text = _text(value)
            records.append(
                {
                    "row": row,
                    "column": bad.column,
                    "value": text,
                    "rule": bad.rule,
                    "message": _message(source, row, bad, text),
                    "raw": json.dumps(original, default=_text, sort_keys=True),
                }
            )
        drop |= bad.mask
    records.sort(key=lambda r: r["row"])
    return pa.Table.from_pylist(records, schema=REJECT_SCHEMA), ~drop
