"""Merging a session: staged parts of every file -> per kind, tables sorted by (symbol,
time) one block of symbols at a time, cross-file duplicates taken out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.ingest import _quarantine
from ticktensor.ingest._staging import Staging
from ticktensor.ingest._stored import STORED_SOURCE
from ticktensor.ingest._symbols import keyed_symbols
from ticktensor.kernels import order_by_key, take_rows
from ticktensor.schemas import EventKind, conform, schema_for

__all__ = ["EXTRA", "Merged", "StagedSession"]

#: Columns staged beside the canonical ones: the input file and the row in it.
EXTRA = ("_source", "_row")


@dataclass(frozen=True)
class Merged:
    """One kind of one block of a session's symbols, ready to store."""

    table: pa.Table
    """Canonical columns, sorted by (symbol, ts_event, input file, row), duplicates out."""
    symbols: pa.DictionaryArray
    """The ``symbol`` column of ``table`` as codes into the sorted names of the session."""
    stored: dict[str, int]
    """Rows of ``table`` per input file."""
    duplicates: pa.Table | None
    """Quarantine entries (rule ``duplicate``) of the rows taken out, if any."""

    @property
    def present(self) -> list[str]:
        """The symbols with rows, sorted."""
        codes = self.symbols.indices.to_numpy(zero_copy_only=False)
        # The block's symbols only: a session's dictionary holds thousands.
        present = np.flatnonzero(np.bincount(codes, minlength=len(self.symbols.dictionary)))
        return cast(list[str], self.symbols.dictionary.take(pa.array(present)).to_pylist())


@dataclass(frozen=True)
class _Staged:
    """One kind's staged rows of a session: every part's rows, the parts one after the
    other in input order, and the stable order of them all by symbol."""

    table: pa.Table
    """The parts' columns but ``symbol`` and ``_source`` (their chunks, not joined)."""
    sources: pa.Array
    """The input files of the rows, sorted."""
    source_codes: npt.NDArray[np.int32] | None
    """Each row's input file, as its index in :attr:`sources`; None for one file."""
    order: npt.NDArray[np.int64]
    """The rows by symbol; ties in input order (file, then row in the file)."""
    offsets: npt.NDArray[np.int64]
    """Where each symbol's rows start in :attr:`order` (one more: the end)."""


def _files_of(staged: _Staged, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
    """The input file of each of ``rows`` (one file, the usual session: all 0, nothing
    gathered)."""
    if staged.source_codes is None:
        return np.zeros(len(rows), np.int32)
    return staged.source_codes[rows]


class StagedSession:
    """One session's staged parts of every kind, numbered by symbol and cut into blocks.

    The symbols of the session, sorted, are numbered ``0..S-1`` (:attr:`names`); a block
    is a range of them holding about :attr:`block_rows` rows (one symbol with more
    rows is a block of its own). Blocks are merged one at a time (:meth:`merge`), so the
    arrays a merge allocates stay the size of a block, not of the session.

    Parts hold their rows in file order. Each kind's rows of every part are ordered by
    symbol once, ties in input order (file, then row), and a block gathers its rows
    from the parts with one take, the parts as they are: not first joined into one copy
    of the session, which no block could start before.

    ``before`` holds, per kind, stored rows of the session's symbols that come before
    each of their symbol's staged rows (canonical, grouped by symbol in symbol order,
    each symbol's in increasing time, none a duplicate of another: see
    :func:`~ticktensor.ingest._stored.preceding_rows`). A block's merge puts them in
    front of its symbols' staged rows as they are, rows of the input
    :data:`~ticktensor.ingest._stored.STORED_SOURCE`: what merging them as one more
    staged part gives, without sorting them or looking for duplicates among them again.

    ``read`` holds, per kind the job has no staged rows of, the stored rows of the kind
    (canonical, sorted by (symbol, time)) that the session's features read: the rows of
    the session's symbols are its block's rows of the kind, as stored, rows of the input
    :data:`~ticktensor.ingest._stored.STORED_SOURCE`; rows of other symbols are left out.
    """

    def __init__(
        self,
        staging: Staging,
        parts: dict[EventKind, list[str]],
        block_rows: int,
        before: Mapping[EventKind, pa.Table] | None = None,
        read: Mapping[EventKind, pa.Table] | None = None,
    ):
        tables = {kind: [staging.read([rel]) for rel in rels] for kind, rels in parts.items()}
        keyed, self.names = keyed_symbols(
            [t.column("symbol") for of_kind in tables.values() for t in of_kind]
        )
        self._dictionary = pa.array(self.names, pa.string())
        self._staged: dict[EventKind, _Staged] = {}
        counts = np.zeros(len(self.names), dtype=np.int64)
        start = 0
        for kind, of_kind in tables.items():
            chunks = [c for of_part in keyed[start : start + len(of_kind)] for c in of_part]
            start += len(of_kind)
            # The rows by symbol, ties in input order: one counting sort, in C++.
            order, of_symbol = order_by_key(chunks, len(self.names))
            counts += of_symbol
            self._staged[kind] = _staged(of_kind, order, of_symbol)
            # Held here now, the parts in memory no longer count against staging's budget.
            staging.release(parts[kind])
        self._before: dict[EventKind, _Before] = {}
        for kind, rows in (before or {}).items():
            self._before[kind] = _Before.of(rows, self._dictionary)
            counts += np.diff(self._before[kind].offsets)
        for kind, rows in (read or {}).items():
            if kind in self._staged:
                raise ValueError(f"stored {kind.value} rows to read beside the staged ones")
            ours = pc.is_in(rows.column("symbol").cast(pa.string()), value_set=self._dictionary)
            self._before[kind] = _Before.of(rows.filter(ours), self._dictionary)
            counts += np.diff(self._before[kind].offsets)
        self.blocks = _blocks(counts, block_rows)
        #: Rows of every kind of the session.
        self.rows = int(counts.sum())

    def merge(self, kind: EventKind, block: int, strict: bool) -> Merged:
        """The rows of ``kind`` of the symbols of ``block``, merged across the parts.

        Rows are ordered by (symbol, ``ts_event``), ties by input file and row, so the
        stored table does not depend on how the job's tasks ran. Rows identical in every
        canonical column to an earlier row are duplicates (see :func:`_duplicates`);
        ``strict`` raises on the first one instead.
        """
        merged = self._merge_staged(kind, block, strict)
        before = self._before.get(kind)
        if before is None:
            return merged
        return before.put_in_front(merged, *self.blocks[block])

    def _merge_staged(self, kind: EventKind, block: int, strict: bool) -> Merged:
        """The staged rows of ``kind`` of the symbols of ``block``, merged."""
        staged = self._staged.get(kind)  # None: a kind of stored rows only (``read``)
        first, end = self.blocks[block]
        lo, hi = (0, 0) if staged is None else (int(staged.offsets[s]) for s in (first, end))
        dictionary = self._dictionary
        if staged is None or hi == lo:  # no symbol of the block has rows of this kind
            none = pa.DictionaryArray.from_arrays(pa.array([], pa.uint32()), dictionary)
            return Merged(conform(schema_for(kind).empty_table(), kind), none, {}, None)
        picked = staged.order[lo:hi]
        # The block's rows by symbol, in input order within a symbol: one gather.
        rest = _take(staged.table, picked)
        codes = np.repeat(
            np.arange(first, end, dtype=np.uint32), np.diff(staged.offsets[first : end + 1])
        )
        source_codes = _files_of(staged, picked)
        ts = np.asarray(rest.column("ts_event").cast(pa.int64()).to_numpy(), dtype=np.int64)
        rows = np.asarray(rest.column("_row").to_numpy(), dtype=np.int64)
        order = _order(codes, ts, source_codes, rows)
        rest = rest.drop_columns(["_row"])
        if order is not None:
            rest = rest.take(pa.array(order))
            codes, source_codes, rows = codes[order], source_codes[order], rows[order]
        rest = rest.append_column("symbol", dictionary.take(pa.array(codes)))
        table = conform(rest, kind)
        sources = staged.sources
        table = table.append_column(
            "_source", pa.DictionaryArray.from_arrays(pa.array(source_codes), sources)
        )
        table = table.append_column("_row", pa.array(rows))
        dup = _duplicates(table, kind)
        duplicates = None
        if dup.any():
            duplicates = _duplicate_entries(kind, table.filter(pa.array(dup)))
            if strict:
                _quarantine.raise_first(duplicates)
            table = table.filter(pa.array(~dup))
            codes, source_codes = codes[~dup], source_codes[~dup]
        if staged.source_codes is None:
            counts = [len(source_codes)]
        else:
            counts = np.bincount(source_codes, minlength=len(sources)).tolist()
        stored = {s: int(n) for s, n in zip(sources.to_pylist(), counts, strict=True) if n}
        symbols = pa.DictionaryArray.from_arrays(pa.array(codes), dictionary)
        return Merged(table.drop_columns(list(EXTRA)), symbols, stored, duplicates)


@dataclass(frozen=True)
class _Before:
    """One kind's stored rows that come before the staged rows of their symbols (if any)."""

    table: pa.Table
    """Canonical columns, grouped by symbol in symbol order."""
    codes: npt.NDArray[np.uint32]
    """Each row's symbol, as its number among the session's sorted symbols."""
    offsets: npt.NDArray[np.int64]
    """Where each of the session's symbols' rows start in :attr:`table` (one more: the end)."""

    @classmethod
    def of(cls, table: pa.Table, dictionary: pa.Array) -> _Before:
        """``table``'s rows, numbered by symbol among ``dictionary`` (which holds each)."""
        found = pc.index_in(table.column("symbol"), value_set=dictionary)
        if found.null_count:
            raise ValueError("stored rows to put in front of a session's have other symbols")
        codes = np.asarray(found.to_numpy(), dtype=np.uint32)
        counts = np.bincount(codes, minlength=len(dictionary))
        return cls(table, codes, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))

    def put_in_front(self, merged: Merged, first: int, end: int) -> Merged:
        """``merged`` (the staged rows of the symbols ``first`` to ``end``) with these
        rows of the same symbols in front of each symbol's: one table, each column one
        array, as a merge of them with the staged rows gives it."""
        lo, hi = int(self.offsets[first]), int(self.offsets[end])
        if lo == hi:
            return merged
        codes = np.concatenate([self.codes[lo:hi], merged.symbols.indices.to_numpy()])
        table = pa.concat_tables([self.table.slice(lo, hi - lo), merged.table])
        if np.any(codes[1:] < codes[:-1]):  # several symbols: each one's rows together
            order = np.argsort(codes, kind="stable")
            table, codes = _take(table, order), codes[order]
        table = table.combine_chunks()
        symbols = pa.DictionaryArray.from_arrays(pa.array(codes), merged.symbols.dictionary)
        stored = {STORED_SOURCE: hi - lo, **merged.stored}
        return Merged(table, symbols, stored, merged.duplicates)


def _staged(
    tables: list[pa.Table], order: npt.NDArray[np.int64], of_symbol: npt.NDArray[np.int64]
) -> _Staged:
    """One kind's parts (``tables``, in input order) with the ``order`` of their rows by
    symbol and the rows per symbol.

    The parts are not joined: a block's take reads from their chunks (held in memory,
    or memory-mapped from staging on disk) on the block's thread, instead of a copy of
    the session made before any block can start.
    """
    sources, source_codes = _source_codes([t.column("_source") for t in tables])
    table = pa.concat_tables(
        [t.drop_columns(["symbol", "_source"]) for t in tables], promote_options="default"
    )
    return _Staged(
        table,
        sources,
        source_codes,
        order,
        np.concatenate([[0], np.cumsum(of_symbol)]).astype(np.int64),
    )


def _take(table: pa.Table, rows: npt.NDArray[np.intp]) -> pa.Table:
    """``table``'s rows ``rows``, read from its chunks as they are.

    Fixed-width columns without nulls (times, prices, sizes, row numbers: nearly every
    staged byte) are gathered natively from the chunks; Arrow's take joins a column's
    chunks into one copy first, on every call. Other columns take Arrow's way.
    """
    indices = None  # Arrow's, made for the first column that needs them
    columns = []
    for column in table.columns:
        width = _fixed_width(column.type)
        if width is None or column.null_count:
            indices = pa.array(rows, pa.int64()) if indices is None else indices
            columns.append(pc.take(column, indices, boundscheck=False))
            continue
        chunks = [
            np.frombuffer(c.buffers()[1], f"u{width}", count=len(c), offset=c.offset * width)
            for c in column.chunks
            if len(c)
        ]
        data = take_rows(chunks, rows, f"u{width}")
        columns.append(pa.Array.from_buffers(column.type, len(rows), [None, pa.py_buffer(data)]))
    return pa.Table.from_arrays(columns, schema=table.schema)


def _fixed_width(type_: pa.DataType) -> int | None:
    """Bytes per value of a type whose values are one plain buffer of them, else None."""
    if pa.types.is_boolean(type_) or not pa.types.is_primitive(type_):
        return None
    width = type_.bit_width // 8
    return width if width in (1, 2, 4, 8) else None


def _blocks(counts: npt.NDArray[np.int64], block_rows: int) -> list[tuple[int, int]]:
    """Ranges of symbols of about ``block_rows`` rows each (``counts`` rows per symbol)."""
    blocks, lo, rows = [], 0, 0
    for i, n in enumerate(counts.tolist()):
        if rows and rows + n > block_rows:
            blocks.append((lo, i))
            lo, rows = i, 0
        rows += n
    blocks.append((lo, len(counts)))
    return blocks


def _source_codes(
    columns: list[pa.ChunkedArray],
) -> tuple[pa.Array, npt.NDArray[np.int32] | None]:
    """The input files of the parts' rows (``_source`` columns), sorted, and each row's
    index among them (None when there is one file).

    Every staged part's ``_source`` is a dictionary of the one file it came from, so
    this costs nothing per row but the codes themselves.
    """
    chunks = [c for column in columns for c in column.chunks if len(c)]
    firsts = [cast(str, c.dictionary[c.indices[0].as_py()].as_py()) for c in chunks]
    names = sorted(set(firsts))
    if len(names) == 1:
        return pa.array(names, pa.string()), None
    rank = {n: i for i, n in enumerate(names)}
    codes = np.repeat(np.array([rank[f] for f in firsts], dtype=np.int32), [len(c) for c in chunks])
    return pa.array(names, pa.string()), codes


def _order(
    symbols: npt.NDArray[np.uint32],
    ts: npt.NDArray[np.int64],
    sources: npt.NDArray[np.int32],
    rows: npt.NDArray[np.int64],
) -> npt.NDArray[np.intp] | None:
    """The permutation that sorts rows ordered by symbol by (symbol, ts, source, row);
    None if they are sorted already.

    Within a symbol the rows come in input order (file, then row), which is time order
    when the files are, as vendors ship them; a full sort by every key is the fallback.
    """
    if symbols.size <= 1:
        return None
    same = symbols[1:] == symbols[:-1]
    step_source, step_row = np.diff(sources), np.diff(rows)
    later = (step_source > 0) | ((step_source == 0) & (step_row > 0))
    if np.all(~same | ((ts[1:] >= ts[:-1]) & later)):
        return None
    return np.lexsort((rows, sources, ts, symbols))


def _duplicates(table: pa.Table, kind: EventKind) -> npt.NDArray[np.bool_]:
    """Rows identical (in every canonical column) to an earlier row.

    MBO is the exception within one file: several fills of one resting order in one
    exchange packet share every field (order id, price, size, sequence, times), so
    there identical rows are real events and only a copy from another file (overlapping
    downloads) is a duplicate.
    """
    # Rows are sorted by (symbol, time) and duplicates share ts_event: only rows in runs
    # of equal timestamps can be duplicates, usually a small fraction, so hash only those.
    ts = table.column("ts_event").cast(pa.int64()).to_numpy()
    same = ts[1:] == ts[:-1]
    candidate = np.zeros(len(ts), dtype=bool)
    candidate[1:] |= same
    candidate[:-1] |= same
    flags_all = np.zeros(len(ts), dtype=bool)
    if not candidate.any():
        return flags_all
    idx = np.flatnonzero(candidate)
    df = cast(pl.DataFrame, pl.from_arrow(table.take(pa.array(idx))))
    canonical = [c for c in df.columns if c not in EXTRA]
    if kind is EventKind.MBO:
        first_source = pl.col("_source").first().over(canonical)
        flags = df.select((pl.col("_source") != first_source).alias("dup"))["dup"]
    else:
        first = df.select(pl.struct(canonical).is_first_distinct().alias("first"))["first"]
        flags = ~first
    flags_all[idx] = flags.to_numpy()
    return flags_all


def _duplicate_entries(kind: EventKind, bad: pa.Table) -> pa.Table:
    n = bad.num_rows
    rendered = _quarantine.rows_as_json(bad.drop_columns(list(EXTRA)), np.arange(n, dtype=np.int64))
    sources = bad.column("_source").to_pylist()
    rows = bad.column("_row").to_pylist()
    return pa.table(
        {
            "source": pa.array(sources, pa.string()),
            "row": pa.array(rows, pa.int64()),
            "kind": pa.array([kind.value] * n, pa.string()),
            "rule": pa.array(["duplicate"] * n, pa.string()),
            "column": pa.array(["*"] * n, pa.string()),
            "value": pa.array([None] * n, pa.string()),
            "message": pa.array(
                [
                    f"{s} row {r}: duplicate of an earlier row"
                    for s, r in zip(sources, rows, strict=True)
                ],
                pa.string(),
            ),
            "raw": pa.array(rendered, pa.string()),
        },
        schema=_quarantine.QUARANTINE_SCHEMA,
    )
