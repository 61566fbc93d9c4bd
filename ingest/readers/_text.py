"""Plain-text record helpers shared by the LOBSTER and tardis readers: split, parse, reject."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.ingest.readers._base import REJECT_SCHEMA
from ticktensor.ingest.readers._layout_hints import layout_hint

__all__ = [
    "Lines",
    "batches",
    "field_count",
    "parse_numbers",
    "reject",
    "rejects_table",
    "split_lines",
]


@dataclass
class Lines:
    """Decoded fields of one block of text lines, with where each row came from."""

    columns: dict[str, pa.Array]
    rows: npt.NDArray[np.int64]
    raw: pa.Array
    rejects: list[dict[str, Any]] = field(default_factory=list)

    def take(self, keep: npt.NDArray[np.bool_]) -> Lines:
        mask = pa.array(keep)
        columns = {k: v.filter(mask) for k, v in self.columns.items()}
        return Lines(columns, self.rows[keep], self.raw.filter(mask), self.rejects)


def reject(
    url: str, row: int, column: str | None, value: str, raw: str, why: str
) -> dict[str, Any]:
    where = f"column {column} value {value!r}" if column else f"line {raw!r}"
    message = f"{url} row {row}: {where}: {why} (rule: unparseable)"
    return {"row": row, "column": column, "value": value, "rule": "unparseable"} | {
        "message": message,
        "raw": raw,
    }


def field_count(
    url: str, row: int, raw: str, actual: int, expected: int, hint: str = ""
) -> dict[str, Any]:
    message = f"{url} row {row}: expected {expected} fields, got {actual}{hint} (rule: field_count)"
    return {"row": row, "column": None, "value": None, "rule": "field_count"} | {
        "message": message,
        "raw": raw,
    }


def split_lines(
    stream: IO[bytes],
    names: tuple[str, ...],
    batch_rows: int,
    url: str,
    skip: int = 0,
    delimiter: str = ",",
) -> Iterator[Lines]:
    """Stream a delimited text file as string columns, about ``batch_rows`` lines at a time.

    Vectorized with Arrow kernels (no per-line Python). Lines with the wrong number of
    fields become rejects; blank lines are skipped. Rows are numbered from 1 after the
    ``skip`` header lines.
    """
    for _ in range(skip):
        stream.readline()
    width, row, pending = len(names), 1, b""
    block_bytes = 64 * batch_rows
    while True:
        chunk = stream.read(block_bytes)
        buf = pending + chunk
        cut = buf.rfind(b"\n") + 1 if chunk else len(buf)
        pending, buf = buf[cut:], buf[:cut]
        if buf:
            text = buf.decode("utf-8", "replace").rstrip("\n")
            lines = pc.utf8_rtrim(pc.split_pattern(pa.array([text]), "\n").flatten(), "\r")
            rows = np.arange(row, row + len(lines), dtype=np.int64)
            row += len(lines)
            counts = pc.add(pc.count_substring(lines, delimiter), 1).to_numpy(zero_copy_only=False)
            blank = pc.equal(pc.utf8_length(lines), 0).to_numpy(zero_copy_only=False)
            good = (counts == width) & ~blank
            wrong = np.flatnonzero(~good & ~blank)
            # One hint per block: a wrong delimiter makes every line wrong the same way.
            hint = layout_hint(str(lines[int(wrong[0])]), delimiter, False) if len(wrong) else ""
            rejects = [
                field_count(url, int(rows[i]), str(lines[i]), int(counts[i]), width, hint)
                for i in wrong
            ]
            kept = lines.filter(pa.array(good))
            flat = pc.split_pattern(kept, delimiter).flatten()
            n = len(kept)
            take = [pa.array(np.arange(j, n * width, width)) for j in range(width)]
            columns = {name: flat.take(take[j]) for j, name in enumerate(names)}
            yield from batches(Lines(columns, rows[good], kept, rejects), batch_rows)
            if n and len(lines):  # adapt the block size to the observed line length
                block_bytes = max(256, int(len(buf) / len(lines) * batch_rows))
        if not chunk:
            return


def batches(lines: Lines, batch_rows: int) -> Iterator[Lines]:
    if len(lines.rows) <= batch_rows:
        yield lines
        return
    for start in range(0, len(lines.rows), batch_rows):
        keep = np.zeros(len(lines.rows), dtype=bool)
        keep[start : start + batch_rows] = True
        part = lines.take(keep)
        part.rejects = lines.rejects if start == 0 else []
        yield part


def parse_numbers(
    lines: Lines, types: dict[str, pa.DataType], url: str, *, empty_null: bool = False
) -> Lines:
    """Cast string columns to numbers; rows with an unparseable value become rejects.

    With ``empty_null`` an empty field is a null, otherwise it is unparseable.
    """
    bad = np.zeros(len(lines.rows), dtype=bool)
    out = dict(lines.columns)
    for name, type_ in types.items():
        column = pc.utf8_trim_whitespace(lines.columns[name])
        if empty_null:
            column = pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column)
        try:
            out[name] = pc.cast(column, type_)
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        for i, value in enumerate(column.to_pylist()):  # rare path: find the culprits
            try:
                pc.cast(pa.array([value], pa.string()), type_)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                if not bad[i]:
                    raw = str(lines.raw[i])
                    why = f"is not a {type_} number"
                    lines.rejects.append(reject(url, int(lines.rows[i]), name, value, raw, why))
                bad[i] = True
        out[name] = pc.cast(pc.if_else(pa.array(bad), pa.scalar("0"), column), type_)
    parsed = Lines(out, lines.rows, lines.raw, lines.rejects)
    return parsed.take(~bad) if bad.any() else parsed


def rejects_table(rejects: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rejects, schema=REJECT_SCHEMA)
