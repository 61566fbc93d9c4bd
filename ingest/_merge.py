"""Merging a session: staged parts of every file -> per kind, tables sorted by (symbol,
time) one block of symbols at a time, cross-file duplicates taken out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from ticktensor.ingest import _quarantine
from ticktensor.ingest._staging import Staging
from ticktensor.ingest._symbols import symbol_codes
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
        names = self.symbols.dictionary.to_pylist()
        codes = self.symbols.indices.to_numpy(zero_copy_only=False)
        counts = np.bincount(codes, minlength=len(names)).tolist()
        return [n for n, c in zip(names, counts, strict=True) if c]


class StagedSession:
    """One session's staged parts of every kind, numbered by symbol and cut into blocks.

    The symbols of the session, sorted, are numbered ``0..S-1`` (:attr:`names`); a block
    is a range of them holding about :attr:`block_rows` rows (one symbol with more
    rows is a block of its own). Blocks are merged one at a time (:meth:`merge`), so the
    arrays a merge allocates stay the size of a block, not of the session.
    """

    def __init__(self, staging: Staging, parts: dict[EventKind, list[str]], block_rows: int):
        self.parts = {kind: [staging.read([rel]) for rel in rels] for kind, rels in parts.items()}
        coded = {
            kind: [symbol_codes(t.column("symbol")) for t in tables]
            for kind, tables in self.parts.items()
        }
        self.names = sorted(
            {n for per_kind in coded.values() for _, names in per_kind for n in names}
        )
        rank = {n: i for i, n in enumerate(self.names)}
        self._codes: dict[EventKind, list[npt.NDArray[np.uint32]]] = {}
        counts = np.zeros(len(self.names), dtype=np.int64)
        for kind, per_part in coded.items():
            self._codes[kind] = []
            for codes, names in per_part:
                ranks = np.array([rank[n] for n in names], dtype=np.uint32)[codes]
                self._codes[kind].append(ranks)
                counts += np.bincount(ranks, minlength=len(self.names))
        self.blocks = _blocks(counts, block_rows)
        # Each part's rows of a block: a slice of the part's rows ordered by symbol.
        starts = np.array([lo for lo, _ in self.blocks] + [len(self.names)], dtype=np.uint32)
        self._order: dict[EventKind, list[npt.NDArray[np.intp] | None]] = {}
        self._bounds: dict[EventKind, list[npt.NDArray[np.intp]]] = {}
        for kind, part_codes in self._codes.items():
            self._order[kind], self._bounds[kind] = [], []
            for codes in part_codes:
                order = None if np.all(codes[1:] >= codes[:-1]) else _by_symbol(codes)
                ordered = codes if order is None else codes[order]
                self._order[kind].append(order)
                self._bounds[kind].append(np.searchsorted(ordered, starts))

    def merge(self, kind: EventKind, block: int, strict: bool) -> Merged:
        """The rows of ``kind`` of the symbols of ``block``, merged across the parts.

        Rows are ordered by (symbol, ``ts_event``), ties by input file and row, so the
        stored table does not depend on how the job's tasks ran. Rows identical in every
        canonical column to an earlier row are duplicates (see :func:`_duplicates`);
        ``strict`` raises on the first one instead.
        """
        pieces, piece_codes = [], []
        for p, table in enumerate(self.parts[kind]):
            lo, hi = (int(b) for b in self._bounds[kind][p][block : block + 2])
            order = self._order[kind][p]
            if hi == lo:
                continue
            if order is None:
                pieces.append(table.slice(lo, hi - lo))
                piece_codes.append(self._codes[kind][p][lo:hi])
            else:
                pieces.append(table.take(pa.array(order[lo:hi])))
                piece_codes.append(self._codes[kind][p][order[lo:hi]])
        dictionary = pa.array(self.names, pa.string())
        if not pieces:  # no symbol of the block has rows of this kind
            none = pa.DictionaryArray.from_arrays(pa.array([], pa.uint32()), dictionary)
            return Merged(conform(schema_for(kind).empty_table(), kind), none, {}, None)
        staged = pa.concat_tables(pieces, promote_options="default")
        codes = np.concatenate(piece_codes)
        sources, source_codes = _source_codes(staged.column("_source"))
        ts = np.asarray(staged.column("ts_event").cast(pa.int64()).to_numpy(), dtype=np.int64)
        rows = np.asarray(staged.column("_row").to_numpy(), dtype=np.int64)
        order = _order(codes, ts, source_codes, rows)
        rest = staged.drop_columns(["symbol", *EXTRA])
        if order is not None:
            rest = rest.take(pa.array(order))
            codes, source_codes, rows = codes[order], source_codes[order], rows[order]
        rest = rest.append_column("symbol", dictionary.take(pa.array(codes)))
        table = conform(rest, kind)
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
        counts = np.bincount(source_codes, minlength=len(sources))
        stored = {s: int(n) for s, n in zip(sources.to_pylist(), counts.tolist(), strict=True) if n}
        symbols = pa.DictionaryArray.from_arrays(pa.array(codes), dictionary)
        return Merged(table.drop_columns(list(EXTRA)), symbols, stored, duplicates)


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


def _by_symbol(codes: npt.NDArray[np.uint32]) -> npt.NDArray[np.intp]:
    """A stable order of the rows by symbol (a radix sort for up to 65,536 symbols)."""
    key = codes.astype(np.uint16) if codes.size and codes.max() < 1 << 16 else codes
    return np.argsort(key, kind="stable")


def _source_codes(column: pa.ChunkedArray) -> tuple[pa.Array, npt.NDArray[np.int32]]:
    """The input files of the rows, sorted, and each row's index among them.

    Every staged part's ``_source`` is a dictionary of the one file it came from, so
    this costs nothing per row but the codes themselves.
    """
    chunks = [c for c in column.chunks if len(c)]
    firsts = [cast(str, c.dictionary[c.indices[0].as_py()].as_py()) for c in chunks]
    names = sorted(set(firsts))
    rank = {n: i for i, n in enumerate(names)}
    codes = np.repeat(np.array([rank[f] for f in firsts], dtype=np.int32), [len(c) for c in chunks])
    return pa.array(names, pa.string()), codes


def _order(
    symbols: npt.NDArray[np.uint32],
    ts: npt.NDArray[np.int64],
    sources: npt.NDArray[np.int32],
    rows: npt.NDArray[np.int64],
) -> npt.NDArray[np.intp] | None:
    """The permutation that sorts the rows by (symbol, ts, source, row); None if sorted.

    The parts come in input order (file, then row) and vendors ship files in time
    order, so a stable sort by symbol alone (a radix sort for up to 65,536 symbols)
    usually sorts them; a full sort by every key is the fallback.
    """
    n = symbols.size
    if n <= 1:
        return None
    # Each part's rows come ordered by symbol, in file order within a symbol, and the
    # parts come in input order: a stable sort by symbol alone puts each symbol's rows
    # in (file, row) order, which is time order when the files are.
    order = None if np.all(symbols[1:] >= symbols[:-1]) else _by_symbol(symbols)
    if order is None:
        by_symbol, by_time, by_source, by_row = symbols, ts, sources, rows
    else:
        by_symbol, by_time = symbols[order], ts[order]
        by_source, by_row = sources[order], rows[order]
    same = by_symbol[1:] == by_symbol[:-1]
    step_source, step_row = np.diff(by_source), np.diff(by_row)
    later = (step_source > 0) | ((step_source == 0) & (step_row > 0))
    if np.all(~same | ((by_time[1:] >= by_time[:-1]) & later)):
        return order
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
