"""A session as the store already holds it, and a job's rows merged in symbol by symbol.

A job writes a session as one table per kind and one pack, of every symbol; a job with
rows of some symbols only takes the place of those symbols' rows and keeps the stored
rows of every other symbol. Stored rows come from the version the job builds on: its
all-symbol tables and pack, or the per-symbol tables and segments an older ticktensor
wrote.

A session may be a partition of many days (a month, a year: see
:mod:`ticktensor.ingest._partition`). A job with some days of it takes the place of its
symbols' stored rows of those days only: the stored rows of its symbols on other days
are carried into the job (:func:`carried_rows`), as rows of the input
:data:`STORED_SOURCE`, so that each symbol's features are computed over the whole
partition, one continuous series; a symbol's rows conflict only where the job and the
store both hold rows of it on a day (``partial`` merges).

The common append, days after the partition's stored ones, carries every stored row of
the job's symbols, and each of them comes before every row of the job
(:func:`preceding_rows` says when, exactly): the merge then puts them in front of the
job's rows as they are, without sorting, checking or comparing them again (``preceded``
merges), and gives what it gives for any carried rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import SchemaError
from ticktensor.ingest._symbols import symbol_codes
from ticktensor.schemas import EventKind, conform
from ticktensor.store import (
    ALL_SYMBOLS,
    PackData,
    PackRecord,
    SegmentRecord,
    SourceFile,
    StoreVersion,
    TableRecord,
)

__all__ = [
    "STORED_SOURCE",
    "Merge",
    "StoredFeatures",
    "StoredSession",
    "carried_rows",
    "merge_events",
    "merge_features",
    "preceding_rows",
]

#: The input file named by stored rows carried into a job (never one of its inputs).
STORED_SOURCE = "<stored>"

DAY_NS = 86_400 * 1_000_000_000

R = TypeVar("R")


@dataclass(frozen=True)
class StoredFeatures:
    """A session's stored feature rows of every symbol, and the names of their columns."""

    session: str
    rows: PackData
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]
    sources: tuple[SourceFile, ...]


@dataclass(frozen=True)
class StoredSession:
    """The records a version holds of one session; rows are read on demand (picklable)."""

    session: str
    #: Per kind, the table of every symbol (key symbol ``ALL_SYMBOLS``).
    tables: Mapping[str, TableRecord] = field(default_factory=dict)
    #: Per kind, the per-symbol tables an older ticktensor wrote, by symbol.
    symbol_tables: Mapping[str, tuple[TableRecord, ...]] = field(default_factory=dict)
    pack: PackRecord | None = None
    #: The session's segments (an older ticktensor's), by symbol.
    segments: tuple[SegmentRecord, ...] = ()

    @staticmethod
    def of(version: StoreVersion, sessions: Iterable[str]) -> dict[str, StoredSession]:
        """What ``version`` holds of each of ``sessions`` (one pass over its records)."""
        wanted = set(sessions)
        tables: dict[str, dict[str, TableRecord]] = {}
        symbol_tables: dict[str, dict[str, list[TableRecord]]] = {}
        for t in version.tables:
            if t.session not in wanted or t.kind == "quarantine":
                continue
            if t.symbol == ALL_SYMBOLS:
                tables.setdefault(t.session, {})[t.kind] = t
            else:
                symbol_tables.setdefault(t.session, {}).setdefault(t.kind, []).append(t)
        segments: dict[str, list[SegmentRecord]] = {}
        for s in version.segments:
            if s.session in wanted:
                segments.setdefault(s.session, []).append(s)
        packs = {p.session: p for p in version.packs if p.session in wanted}
        held = set(tables) | set(symbol_tables) | set(segments) | set(packs)
        return {s: _session(s, tables, symbol_tables, packs, segments) for s in sorted(held)}

    def symbol_table_keys(self, kind: EventKind) -> list[tuple[str, str, str]]:
        """Keys of the per-symbol tables of ``kind``, which a table of every symbol
        of the session takes the place of."""
        return [t.key for t in self.symbol_tables.get(kind.value, ())]

    def events(self, version: StoreVersion, kind: EventKind) -> pa.Table | None:
        """Every stored row of ``kind``, canonical and sorted by (symbol, ts); None if none.

        A symbol takes its rows from the table of every symbol when that holds any, else
        from its own table.
        """
        whole = self.tables.get(kind.value)
        parts = [] if whole is None else [conform(version.read_table(whole), kind)]
        own = self.symbol_tables.get(kind.value, ())
        if not own:
            return parts[0] if parts else None
        held = set(_runs(parts[0])[0]) if parts else set()
        parts += [conform(version.read_table(t), kind) for t in own if t.symbol not in held]
        table = pa.concat_tables(parts)
        codes, _ = symbol_codes(table.column("symbol"))
        if np.any(codes[1:] < codes[:-1]):  # per-symbol tables beside one of every symbol
            table = table.take(pa.array(np.argsort(codes, kind="stable")))
        return table

    def sources(self, kind: EventKind) -> tuple[SourceFile, ...]:
        """The input files of the stored tables of ``kind``."""
        whole = self.tables.get(kind.value)
        records = ([] if whole is None else [whole]) + list(self.symbol_tables.get(kind.value, ()))
        return tuple(s for r in records for s in r.sources)

    def features(self, version: StoreVersion) -> StoredFeatures | None:
        """The session's stored feature rows (its pack's, or its segments' in symbol order)."""
        if self.pack is not None:
            data = version.read_pack(self.pack)
            labels = data.labels if data.labels is not None else _no_labels(data.ts.shape[0])
            rows = PackData(data.symbols, data.offsets, data.ts, data.values, labels)
            p = self.pack
            return StoredFeatures(self.session, rows, p.feature_names, p.label_names, p.sources)
        if not self.segments:
            return None
        read = [version.read_segment(s) for s in self.segments]
        first = self.segments[0]
        rows = PackData(
            tuple(s.symbol for s in self.segments),
            np.concatenate([[0], np.cumsum([d.ts.shape[0] for d in read])]).astype(np.int64),
            np.concatenate([d.ts for d in read]),
            np.concatenate([d.values for d in read]),
            np.concatenate(
                [d.labels if d.labels is not None else _no_labels(d.ts.shape[0]) for d in read]
            ),
        )
        sources = tuple(f for s in self.segments for f in s.sources)
        return StoredFeatures(self.session, rows, first.feature_names, first.label_names, sources)


def _session(
    session: str,
    tables: dict[str, dict[str, TableRecord]],
    symbol_tables: dict[str, dict[str, list[TableRecord]]],
    packs: dict[str, PackRecord],
    segments: dict[str, list[SegmentRecord]],
) -> StoredSession:
    by_kind = symbol_tables.get(session, {})
    return StoredSession(
        session,
        tables.get(session, {}),
        {kind: tuple(sorted(ts, key=lambda t: t.symbol)) for kind, ts in by_kind.items()},
        packs.get(session),
        tuple(sorted(segments.get(session, []), key=lambda r: r.symbol)),
    )


@dataclass(frozen=True)
class Merge(Generic[R]):
    """A session's rows of one kind (or its features) in the version a job writes."""

    rows: R
    """The job's rows of its symbols and the stored rows of every other symbol, by symbol."""
    conflicts: tuple[str, ...]
    """The job's symbols whose stored rows differ from the job's."""
    kept: tuple[str, ...]
    """The stored symbols the job has no rows of: their rows are the store's."""
    unchanged: bool
    """The rows are the stored rows, symbol for symbol."""


def carried_rows(job: list[pa.Table], stored: pa.Table) -> pa.Table:
    """The ``stored`` rows of a partition's kind that the job keeps beside its own: those
    of the job's symbols (of ``job``, its staged parts of the kind) on days the job has no
    rows of the symbol. Vectorized: a (symbol, day) key per row, one membership test."""
    symbols = _symbols_of(job)
    job_keys = [_day_keys(t.column("symbol"), t.column("ts_event"), symbols) for t in job]
    held = _day_keys(stored.column("symbol"), stored.column("ts_event"), symbols)
    # Rows of other symbols have no key (-1): never the job's, never carried.
    mask = (held >= 0) & ~np.isin(held, np.concatenate([np.empty(0, np.int64), *job_keys]))
    return stored.filter(pa.array(mask))


def preceding_rows(job: list[pa.Table], stored: pa.Table) -> pa.Table | None:
    """The rows :func:`carried_rows` gives when each of them comes before every row of
    the job: the ``stored`` rows of the job's symbols, if they are grouped by symbol in
    symbol order, each symbol's in strictly increasing time, and the last of them falls
    on a UTC day before the first day of ``job`` (its staged parts of the kind); else None.

    Days appended after a partition's stored days give them. A merge of the job's rows
    with them then puts each symbol's stored rows in front of its job rows, in their
    stored order: no job row ties in time with (or duplicates) a stored row, no stored
    row duplicates another (their times differ), and no day holds rows of both, so none
    of the job's symbols conflicts with its stored rows. A job with rows on a stored day,
    or before one, gets None: its rows go through the merge that sorts and compares.
    """
    symbols = _symbols_of(job)
    names = symbols.take(pc.array_sort_indices(symbols))  # in UTF-8 byte (Python's) order
    index = pc.index_in(stored.column("symbol").cast(pa.string()), value_set=names)
    rows = stored.filter(index.is_valid()) if index.null_count else stored
    if rows.num_rows == 0:
        return rows
    # Each row's symbol as its rank among the job's sorted symbols.
    codes = np.asarray(index.drop_null().to_numpy(), dtype=np.int64)
    ts = _ts(rows)
    before, after = slice(None, -1), slice(1, None)
    same_symbol = codes[after] == codes[before]
    if np.any(codes[after] < codes[before]) or np.any(same_symbol & (ts[after] <= ts[before])):
        return None
    first = min(int(_ts(t).min()) for t in job if t.num_rows)
    return rows if int(ts.max()) // DAY_NS < first // DAY_NS else None


def _symbols_of(job: list[pa.Table]) -> pa.Array:
    """The symbols with rows in ``job`` (staged parts), each once."""
    chunks = [c.cast(pa.string()) for t in job for c in t.column("symbol").chunks]
    return pc.unique(pa.chunked_array(chunks, pa.string()))


#: Days since the epoch of int64 nanoseconds lie in [-_DAYS, _DAYS): a key's day field.
_DAYS = 1 << 17


def _day_keys(
    symbols: pa.ChunkedArray, ts: pa.ChunkedArray, names: pa.Array
) -> npt.NDArray[np.int64]:
    """A (symbol, UTC day) key of each row: the symbol's index in ``names`` and the day
    since the epoch; -1 for a symbol not in ``names``."""
    index = pc.index_in(symbols.cast(pa.string()), value_set=names)
    codes = np.asarray(index.fill_null(-1).to_numpy(), dtype=np.int64)
    days = np.asarray(ts.cast(pa.int64()).to_numpy(), dtype=np.int64) // DAY_NS + _DAYS
    return np.where(codes < 0, -1, codes * (2 * _DAYS) + days)


def _common_days(
    ts_a: npt.NDArray[np.int64], ts_b: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Which rows of each side fall on a UTC day both sides have rows on."""
    day_a, day_b = ts_a // DAY_NS, ts_b // DAY_NS
    if not len(day_a) or not len(day_b):
        return np.zeros(len(day_a), np.bool_), np.zeros(len(day_b), np.bool_)
    first = min(day_a.min(), day_b.min())
    span = int(max(day_a.max(), day_b.max()) - first) + 1
    if span > 8 * (len(day_a) + len(day_b)) + 4096:  # few rows over many days: sort
        common = np.intersect1d(day_a, day_b)
        return np.isin(day_a, common), np.isin(day_b, common)
    # A flag per day of the range both sides cover, instead of sorting both sides.
    on_a, on_b = np.zeros(span, np.bool_), np.zeros(span, np.bool_)
    on_a[day_a - first] = True
    on_b[day_b - first] = True
    return on_b[day_a - first], on_a[day_b - first]


def _ts(table: pa.Table) -> npt.NDArray[np.int64]:
    return np.asarray(table.column("ts_event").cast(pa.int64()).to_numpy(), dtype=np.int64)


def merge_events(
    job: pa.Table, stored: pa.Table | None, *, partial: bool = False, preceded: bool = False
) -> Merge[pa.Table]:
    """``job``'s rows (canonical, sorted by symbol) over the ``stored`` rows of its kind.

    ``partial``: the session is a partition the job has some days of; a symbol's rows
    conflict only on the days both hold rows of it. ``preceded``: moreover, each of the
    job's symbols with stored rows has them all in front of its own rows, as stored
    (the merge of a job with the :func:`preceding_rows` of its kind): its rows differ
    from the stored ones (it has more) and agree with them on every day both hold, so
    they are not compared.
    """
    if stored is None or stored.num_rows == 0:
        return Merge(job, (), (), stored is not None and job.num_rows == 0)
    if stored.schema != job.schema:
        stored = stored.cast(job.schema)
    (job_symbols, job_offsets), (held_symbols, held_offsets) = _runs(job), _runs(stored)

    def same(i: int, j: int) -> tuple[bool, bool]:
        if preceded and partial:
            return False, False
        a = job.slice(job_offsets[i], job_offsets[i + 1] - job_offsets[i])
        b = stored.slice(held_offsets[j], held_offsets[j + 1] - held_offsets[j])
        if _same_table(a, b):
            return True, False
        if not partial:
            return False, True
        in_a, in_b = _common_days(_ts(a), _ts(b))
        return False, not _same_table(a.filter(pa.array(in_a)), b.filter(pa.array(in_b)))

    pieces, conflicts, kept, unchanged = _plan(
        job_symbols, job_offsets, held_symbols, held_offsets, same
    )
    sources = (job, stored)
    rows = pa.concat_tables([sources[s].slice(lo, hi - lo) for s, lo, hi in pieces])
    return Merge(rows, conflicts, kept, unchanged)


def merge_features(
    job: PackData,
    names: tuple[tuple[str, ...], tuple[str, ...]],
    stored: StoredFeatures | None,
    *,
    partial: bool = False,
) -> Merge[PackData]:
    """``job``'s feature rows (columns ``names``: features, labels) over the ``stored`` ones.

    ``partial``: the session is a partition the job has some days of; a symbol's rows
    conflict only where both hold rows of it on a day, and labels there may differ (the
    job's rows after those days give them a future the stored ones lacked).

    Stored rows of other feature or label names differ from the job's; keeping such a
    symbol's rows beside the job's is a :class:`SchemaError` (a pack has one set of
    columns).
    """
    if stored is None:
        return Merge(job, (), (), False)
    held = stored.rows
    same_names = names == (stored.feature_names, stored.label_names)

    def same(i: int, j: int) -> tuple[bool, bool]:
        a, b = slice(*job.offsets[i : i + 2]), slice(*held.offsets[j : j + 2])
        equal = (
            same_names
            and np.array_equal(job.ts[a], held.ts[b])
            and np.array_equal(job.values[a], held.values[b], equal_nan=True)
            and np.array_equal(_labels(job)[a], _labels(held)[b], equal_nan=True)
        )
        if equal or not partial or not same_names:
            return equal, not equal
        if _extends(job.ts[a], job.values[a], held.ts[b], held.values[b]):
            return False, False  # what the days both hold (the stored ones) would say
        in_a, in_b = _common_days(job.ts[a], held.ts[b])
        ts_a, ts_b = job.ts[a][in_a], held.ts[b][in_b]
        values_a, values_b = job.values[a][in_a], held.values[b][in_b]
        return False, not _continues(ts_a, values_a, ts_b, values_b)

    pieces, conflicts, kept, unchanged = _plan(
        job.symbols, job.offsets, held.symbols, held.offsets, same
    )
    if kept and not same_names:
        more = f" and {len(kept) - 1} more symbol(s)" if len(kept) > 1 else ""
        raise SchemaError(
            f"session {stored.session}: the store holds features {list(stored.feature_names)} "
            f"and labels {list(stored.label_names)} of {kept[0]}{more}, which this job has no "
            f"rows of; the job computes features {list(names[0])} and labels "
            f"{list(names[1])}, and a pack holds one set of columns: ingest every symbol of "
            "the session with the job's spec"
        )
    counts = dict(zip(held.symbols, np.diff(held.offsets).tolist(), strict=True))
    counts.update(zip(job.symbols, np.diff(job.offsets).tolist(), strict=True))
    symbols = tuple(sorted(counts))
    sources = (job, held)
    rows = PackData(
        symbols,
        np.concatenate([[0], np.cumsum([counts[s] for s in symbols])]).astype(np.int64),
        _joined([sources[s].ts[lo:hi] for s, lo, hi in pieces]),
        _joined([sources[s].values[lo:hi] for s, lo, hi in pieces]),
        _joined([_labels(sources[s])[lo:hi] for s, lo, hi in pieces]),
    )
    return Merge(rows, conflicts, kept, unchanged)


def _extends(
    ts_a: npt.NDArray[np.int64],
    values_a: npt.NDArray[np.float32],
    ts_b: npt.NDArray[np.int64],
    values_b: npt.NDArray[np.float32],
) -> bool:
    """Whether rows ``a`` are the ``b`` rows (times and values, NaN equal to NaN) and more
    rows after the last of ``b``: an appended day's features (a feature of a row never sees
    the rows after it). The rows of the days both hold then continue the stored ones
    (:func:`_continues`), so comparing them day by day says the same."""
    return 0 < len(ts_b) < len(ts_a) and _continues(ts_a, values_a, ts_b, values_b)


def _continues(
    ts_a: npt.NDArray[np.int64],
    values_a: npt.NDArray[np.float32],
    ts_b: npt.NDArray[np.int64],
    values_b: npt.NDArray[np.float32],
) -> bool:
    """Whether rows ``a`` (a symbol's job rows on the days it shares with the stored ones)
    begin with the ``b`` rows (times and values, NaN equal to NaN) and hold nothing else
    but rows after the last of ``b``.

    Rows after the last stored one may share its UTC day: a bar's feature row is stamped
    at its close, so the last stored row of 24-hour hourly bars (the 23:00 bar's) is on
    the next day, the day an append brings the rows of.
    """
    n = len(ts_b)
    return (
        n <= len(ts_a)
        and np.array_equal(ts_a[:n], ts_b)
        and (n == len(ts_a) or n == 0 or int(ts_a[n:].min()) > int(ts_b[-1]))
        and np.array_equal(values_a[:n], values_b, equal_nan=True)
    )


def _joined(parts: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """The pieces one after the other; the piece itself when there is one."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _labels(rows: PackData) -> npt.NDArray[np.float32]:
    return rows.labels if rows.labels is not None else _no_labels(rows.ts.shape[0])


def _no_labels(rows: int) -> npt.NDArray[np.float32]:
    return np.empty((rows, 0), dtype=np.float32)


def _plan(
    job_symbols: tuple[str, ...] | list[str],
    job_offsets: npt.NDArray[np.int64],
    held_symbols: tuple[str, ...] | list[str],
    held_offsets: npt.NDArray[np.int64],
    same: Callable[[int, int], tuple[bool, bool]],
) -> tuple[list[tuple[int, int, int]], tuple[str, ...], tuple[str, ...], bool]:
    """The merged rows as ``(source, lo, hi)`` ranges (0: the job's, 1: the store's), in
    symbol order, contiguous ranges joined; the conflicts, the kept symbols, and whether
    the merged rows are the stored ones. ``same(i, j)`` says whether the job's rows of a
    symbol equal the stored ones, and whether they conflict with them."""
    held = {s: j for j, s in enumerate(held_symbols)}
    job = {s: i for i, s in enumerate(job_symbols)}
    pieces: list[tuple[int, int, int]] = []
    conflicts, kept = [], []
    unchanged = True
    for symbol in sorted(job.keys() | held.keys()):
        i, j = job.get(symbol), held.get(symbol)
        if i is not None:
            piece = (0, int(job_offsets[i]), int(job_offsets[i + 1]))
            equal, conflicting = (False, False) if j is None else same(i, j)
            unchanged = unchanged and equal
            conflicts += [symbol] if conflicting else []
        elif j is not None:
            piece = (1, int(held_offsets[j]), int(held_offsets[j + 1]))
            kept.append(symbol)
        if pieces and pieces[-1][0] == piece[0] and pieces[-1][2] == piece[1]:
            pieces[-1] = (piece[0], pieces[-1][1], piece[2])
        else:
            pieces.append(piece)
    return pieces, tuple(conflicts), tuple(kept), unchanged


def _runs(table: pa.Table) -> tuple[list[str], npt.NDArray[np.int64]]:
    """The symbols of a table sorted by symbol, and the offsets of their rows."""
    codes, names = symbol_codes(table.column("symbol"))
    counts = np.bincount(codes, minlength=len(names))
    present = counts > 0
    offsets = np.concatenate([[0], np.cumsum(counts[present])]).astype(np.int64)
    return [n for n, p in zip(names, present.tolist(), strict=True) if p], offsets


def _same_table(a: pa.Table, b: pa.Table) -> bool:
    """Equal rows, column by column; NaN equals NaN (as re-reading a float gives it)."""
    if a.num_rows != b.num_rows:
        return False
    for x, y in zip(a.columns, b.columns, strict=True):
        if x.equals(y):
            continue
        if not pa.types.is_floating(x.type):
            return False
        if not pc.equal(pc.is_null(x), pc.is_null(y)).to_numpy(zero_copy_only=False).all():
            return False
        xs, ys = x.to_numpy(zero_copy_only=False), y.to_numpy(zero_copy_only=False)
        if not np.array_equal(xs, ys, equal_nan=True):
            return False
    return True
