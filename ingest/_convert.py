"""Phase one of an ingest job: one input file -> validated staging parts, one per session."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.ingest import _quarantine
from ticktensor.ingest._background import read_ahead
from ticktensor.ingest._sources import Input
from ticktensor.ingest._staging import Staging, repeated
from ticktensor.ingest.readers import get_reader
from ticktensor.ingest.readers._base import EventBatch, ReadOptions
from ticktensor.schemas import EventKind, conform, validate

__all__ = ["ConvertTask", "FileResult", "convert_file", "session_of"]

DAY_NS = 86_400 * 1_000_000_000

#: Input bytes up to which a file is decoded on the thread that validates its batches.
SMALL_FILE_BYTES = 1 << 20


def session_of(day_index: int) -> str:
    """The session name of UTC day ``day_index`` (days since the epoch): ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(day_index * 86_400, tz=UTC).date().isoformat()


@dataclass(frozen=True)
class ConvertTask:
    """Everything a worker needs to convert one file (picklable)."""

    source: Input
    reader: str
    options: ReadOptions
    staging: Staging
    tag: str
    ts_range: tuple[int, int] | None = None
    strict: bool = False


@dataclass
class FileResult:
    """What phase one did with one file. ``rows_read = rows_kept + rows_quarantined``.

    ``schema`` is the kind of the file's rows, or ``"mixed"`` when they are of several.
    """

    file: str
    format: str
    schema: str | None
    rows_read: int = 0
    rows_kept: int = 0
    rows_quarantined: int = 0
    bytes: int = 0
    sha256: str = ""
    seconds: float = 0.0
    rules: dict[str, int] = field(default_factory=dict)
    parts: list[tuple[str, EventKind, str]] = field(default_factory=list)
    quarantine: str | None = None
    inference: dict[str, Any] | None = None
    #: ``(session, rows, symbols)`` of each staged piece: its UTC day, rows and (an upper
    #: bound of) its symbols; what the job's partition is chosen from.
    days: list[tuple[str, int, int]] = field(default_factory=list)


def convert_file(task: ConvertTask) -> FileResult:
    """Read, validate and partition one file into staging parts; bad rows are quarantined.

    In strict mode the first broken rule raises :class:`~ticktensor.errors.ValidationError`
    naming the file, row, column, value and rule.
    """
    t0 = time.perf_counter()
    url = task.source.url
    result = FileResult(file=url, format=task.reader, schema=None, bytes=task.source.size)
    quarantined: list[pa.Table] = []
    kinds: set[str] = set()  # the kinds of the rows read
    with contextlib.closing(_decoded(task)) as batches:  # closed on an error too
        for i, batch in enumerate(batches):
            if batch.table.num_rows:
                kinds.add(batch.kind.value)
            # A file of several kinds (a live DBN capture, a Binance stream) reads "mixed".
            result.schema = "mixed" if len(kinds) > 1 else next(iter(kinds), batch.kind.value)
            if batch.inference is not None and result.inference is None:
                result.inference = batch.inference.to_dict()
            # Duplicates are found in phase two, over the whole session, across files.
            checked = validate(
                batch.table, batch.kind, ts_range=task.ts_range, check_duplicates=False
            )
            q = pa.concat_tables(
                [
                    _quarantine.from_rejects(url, batch.kind.value, batch.rejects),
                    _quarantine.from_violations(
                        url, batch.kind.value, batch.table, checked, batch.rows, batch.raw
                    ),
                ]
            )
            if task.strict:
                _quarantine.raise_first(q)
            mask = checked.valid_mask()
            if mask.all():  # the usual case: spare a copy of every column
                kept, rows = batch.table, batch.rows
            else:
                kept, rows = batch.table.filter(pa.array(mask)), batch.rows[mask]
            kept = conform(kept, batch.kind).append_column("_row", pa.array(rows, pa.int64()))
            result.rows_read += batch.table.num_rows + batch.rejects.num_rows
            result.rows_kept += kept.num_rows
            result.rows_quarantined += batch.rejects.num_rows + len(checked.bad_rows())
            if q.num_rows:
                quarantined.append(q)
                for rule in q.column("rule").to_pylist():
                    result.rules[rule] = result.rules.get(rule, 0) + 1
            result.parts += _write_parts(task, batch.kind, kept, f"{task.tag}-{i:05d}", result.days)
    if quarantined:
        table = pa.concat_tables(quarantined)
        result.quarantine = task.staging.write_quarantine(task.tag, table)
    result.sha256 = task.source.sha256 or ""
    result.seconds = time.perf_counter() - t0
    return result


def _decoded(task: ConvertTask) -> Generator[EventBatch, None, None]:
    """The file's batches. The reader decodes batch i + 1 on its own thread while the
    caller validates and partitions batch i (both sides run mostly with the GIL
    released); a small file is one batch or a few, too little to pay for the thread.
    Closing this stops that thread now, not when GC runs."""
    batches = get_reader(task.reader).read(task.source, task.options)
    if task.source.size > SMALL_FILE_BYTES:
        yield from read_ahead(batches, "ticktensor-decode")
    else:
        yield from batches


def _write_parts(
    task: ConvertTask,
    kind: EventKind,
    table: pa.Table,
    tag: str,
    days: list[tuple[str, int, int]],
) -> list[tuple[str, EventKind, str]]:
    """Split by UTC day and stage each piece, its rows in file order, its symbols as a
    dictionary (assemble orders a session's rows by symbol, every part at once); each
    piece's day, rows and symbols (the batch's, an upper bound) go to ``days``."""
    if table.num_rows == 0:
        return []
    empty = [
        c
        for c, col in zip(table.column_names, table.columns, strict=True)
        if col.null_count == len(col)
    ]
    table = _symbols_encoded(table.drop_columns(empty))
    # The same file on every row, as a dictionary of one string: no per-row copy.
    table = table.append_column("_source", repeated(task.source.url, table.num_rows))
    symbols = max((len(c.dictionary) for c in table.column("symbol").chunks), default=0)
    pieces = _by_day(table)
    # Many days (a file of daily bars): each piece's share of the batch's bytes, not its own
    # measure (slower than staging it), and its all-null columns kept.
    row_bytes = table.nbytes / table.num_rows if len(pieces) > 1 else None
    out = []
    for day, piece in pieces:
        session = session_of(day)
        days.append((session, piece.num_rows, min(symbols, piece.num_rows)))
        nbytes = None if row_bytes is None else int(row_bytes * piece.num_rows)
        out.append((session, kind, task.staging.write_part(kind, session, tag, piece, nbytes)))
    return out


def _symbols_encoded(table: pa.Table) -> pa.Table:
    """``table`` with its ``symbol`` column as one dictionary array: assemble ranks a
    part's symbols through its dictionary instead of comparing text per row."""
    index = table.schema.get_field_index("symbol")
    symbols = table.column(index)
    if pa.types.is_dictionary(symbols.type):
        return table
    # The chunks of one encoding share its dictionary: joining them copies codes only.
    encoded = symbols.dictionary_encode().combine_chunks()
    return table.set_column(index, "symbol", encoded)


def _by_day(table: pa.Table) -> list[tuple[int, pa.Table]]:
    """``table``'s rows split by UTC day (days since the epoch), each day's in file order.

    Most files hold one day, found from the least and greatest time alone; a file in
    time order splits into slices; only other files need a gather.
    """
    ts = table.column("ts_event")
    bounds = pc.min_max(ts)
    first, last = (bounds[k].cast(pa.int64()).as_py() // DAY_NS for k in ("min", "max"))
    if first == last:
        return [(first, table)]
    days = ts.cast(pa.int64()).to_numpy() // DAY_NS - first
    if np.any(days[1:] < days[:-1]):
        # Few distinct days: a 16-bit key lets numpy's stable sort run as a radix sort.
        key = days.astype(np.uint16) if days.max() < 1 << 16 else days
        order = np.argsort(key, kind="stable")
        table = pc.take(table, pa.array(order), boundscheck=False)
        days = days[order]
    starts = np.flatnonzero(np.diff(days)) + 1
    los, his = [0, *starts.tolist()], [*starts.tolist(), table.num_rows]
    return [
        (first + int(days[lo]), table.slice(lo, hi - lo)) for lo, hi in zip(los, his, strict=True)
    ]
