"""Phase two of an ingest job: one session of every symbol -> one table per kind + one pack."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.ingest._feature_engine import FeatureArrays, SymbolFeatures
from ticktensor.ingest._feature_rows import CLOCK_INPUTS
from ticktensor.ingest._merge import Merged, StagedSession
from ticktensor.ingest._staging import Staging
from ticktensor.ingest._stored import (
    Merge,
    StoredFeatures,
    StoredSession,
    merge_events,
    merge_features,
)
from ticktensor.schemas import REFERENCE_KINDS, EventKind, FeatureSpec
from ticktensor.store import (
    ALL_SYMBOLS,
    Layout,
    PackData,
    PackRecord,
    PackWriter,
    SourceFile,
    Store,
    TableEncoder,
    TableRecord,
)

__all__ = [
    "BLOCK_ROWS",
    "AssembleResult",
    "AssembleTask",
    "StatsPartial",
    "assemble",
]

R = TypeVar("R")

BLOCK_ROWS = 1 << 18
"""Rows (of every kind) a session is merged and computed in at once. Small blocks keep
the arrays (and polars' intermediates) of a block small enough that the next block
reuses their memory instead of taking fresh pages the kernel must clear."""


@dataclass(frozen=True)
class AssembleTask:
    """Everything a worker needs to assemble one session of every symbol (picklable)."""

    session: str
    parts: dict[EventKind, list[str]]
    staging: Staging
    store_url: str
    spec: FeatureSpec | None
    layout: Layout | None
    sources: dict[str, SourceFile]
    #: The version the job builds on, and what it holds of the session.
    base_version: int = 0
    stored: StoredSession | None = None
    #: The job's rows of a symbol may take the place of other stored rows of it.
    replace: bool = False
    strict: bool = False
    #: Threads the task may keep busy (the job's workers it has to itself).
    threads: int = 1
    #: About how many rows of the session to merge and compute at once.
    block_rows: int = BLOCK_ROWS


STATS_GROUP_ROWS = 1 << 16
"""Rows a :class:`StatsPartial` sums at once (see there)."""


@dataclass
class StatsPartial:
    """Mergeable float64 sums for per-feature mean/std over the training period.

    Rows are summed in groups of :data:`STATS_GROUP_ROWS` in the order they are added,
    the group sums one after the other: a session's rows give the same sums whether
    they come at once or a block at a time (a rerun of a job stores the same stats).
    """

    count: int = 0
    total: npt.NDArray[np.float64] | None = None
    total_sq: npt.NDArray[np.float64] | None = None
    _waiting: list[npt.NDArray[np.float32]] = field(default_factory=list, repr=False)
    _waiting_rows: int = 0

    def add(self, values: npt.NDArray[np.float32]) -> None:
        self._waiting.append(values)
        self._waiting_rows += values.shape[0]
        self.count += values.shape[0]
        if self._waiting_rows >= STATS_GROUP_ROWS:
            rows = np.concatenate(self._waiting)
            whole = rows.shape[0] - rows.shape[0] % STATS_GROUP_ROWS
            for lo in range(0, whole, STATS_GROUP_ROWS):
                self._sum(rows[lo : lo + STATS_GROUP_ROWS])
            self._waiting = [rows[whole:]] if whole < rows.shape[0] else []
            self._waiting_rows = rows.shape[0] - whole

    def merge(self, other: StatsPartial) -> None:
        """Add ``other``'s sums (its rows after this one's)."""
        self._flush()
        other._flush()
        if other.total is not None and other.total_sq is not None:
            self.total = other.total if self.total is None else self.total + other.total
            self.total_sq = (
                other.total_sq if self.total_sq is None else self.total_sq + other.total_sq
            )
            self.count += other.count

    def mean_std(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        self._flush()
        if self.total is None or self.total_sq is None or self.count == 0:
            raise ValueError("no rows fell in the statistics period")
        mean = self.total / self.count
        var = np.maximum(self.total_sq / self.count - mean * mean, 0.0)
        return mean, np.sqrt(var)

    def _flush(self) -> None:
        """Sum the rows short of a group (no more rows come)."""
        if self._waiting_rows:
            self._sum(np.concatenate(self._waiting))
        self._waiting, self._waiting_rows = [], 0

    def _sum(self, values: npt.NDArray[np.float32]) -> None:
        v = values.astype(np.float64)
        v = np.where(np.isfinite(v), v, 0.0)
        s, sq = v.sum(axis=0), (v * v).sum(axis=0)
        self.total = s if self.total is None else self.total + s
        self.total_sq = sq if self.total_sq is None else self.total_sq + sq


@dataclass
class AssembleResult:
    """What phase two produced for one session."""

    session: str
    tables: list[TableRecord] = field(default_factory=list)
    pack: PackRecord | None = None
    duplicates: pa.Table | None = None
    stored: Counter[str] = field(default_factory=Counter)
    stats: StatsPartial = field(default_factory=StatsPartial)
    notes: list[str] = field(default_factory=list)
    #: Event rows of the job stored (every kind) and symbols with feature rows in the pack.
    events: int = 0
    series: int = 0
    #: ``(what, symbol)`` of the job's symbols whose stored rows differ (``trades
    #: events``, ``features``); without replace the session is then not written.
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    #: Keys of per-symbol tables the session's tables of every symbol take the place of.
    removed_tables: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class _Block:
    """One block of a session's symbols: each kind's rows, their features, and per symbol
    the feature rows and the values beyond float32's range."""

    merged: dict[EventKind, Merged]
    features: SymbolFeatures | None
    rows: dict[str, int]
    infinite: dict[str, int]

    @classmethod
    def of(cls, merged: dict[EventKind, Merged], features: SymbolFeatures | None) -> _Block:
        if features is None:
            return cls(merged, None, {}, {})
        rows = np.diff(features.offsets).tolist()
        infinite = _per_symbol(_infinite(features.features), features.offsets).tolist()
        return cls(
            merged,
            features,
            dict(zip(features.symbols, rows, strict=True)),
            {s: n for s, n in zip(features.symbols, infinite, strict=True) if n},
        )


def assemble(task: AssembleTask) -> AssembleResult:
    """Merge a session's parts, drop cross-file duplicates, write its tables and its pack.

    Every kind becomes one table of every symbol, sorted by (symbol, time); features
    come from the market kinds only and are written as one pack. The reference kinds
    (definitions, statistics) pass through to tables: an instrument with reference data
    and no market events gets no rows in the pack, and no note says so.

    The job's rows of a symbol take the place of the rows the store holds of it (of
    each kind, and its feature rows); every other symbol of the session keeps its
    stored rows (see :mod:`ticktensor.ingest._stored`). A symbol stored with other rows
    is a conflict: without ``task.replace`` nothing of the session is written and the
    result lists the conflicts.

    The session is merged and its features computed a block of symbols at a time
    (about ``task.block_rows`` rows, see :class:`StagedSession`), on ``task.threads``
    threads; each symbol's features depend on its own rows only, so the blocks change
    nothing in the result. When the store holds no rows of a kind in the session, its
    table is encoded (Parquet, zstd) a block at a time as the blocks are merged; when it
    holds no feature rows of the session, the pack's chunks are encoded and hashed a
    block at a time as their features are computed. Either is written only once nothing
    can refuse the session.
    """
    store = Store.open(task.store_url)
    base = store.version(task.base_version)
    stored = task.stored or StoredSession(task.session)
    out = AssembleResult(task.session)
    session = StagedSession(task.staging, task.parts, task.block_rows)
    kinds = sorted(task.parts)
    market = [k for k in kinds if k not in REFERENCE_KINDS]
    computes = task.spec is not None and bool(market)
    with (
        _pool(task.threads, "ticktensor-session") as pool,
        # Besides the task's threads, one per table and one for the pack: they mostly
        # wait for the blocks.
        _pool(
            task.threads + len(kinds) + 1 if task.threads > 1 else 1, "ticktensor-tables"
        ) as writer,
    ):
        held = {k: _run(pool, stored.events, version=base, kind=k) for k in kinds}
        held_features = _run(pool, stored.features, version=base) if computes else None
        # A block hands its merged rows over before it computes their features: the
        # tables need the rows only, so their encoding can start (on ``writer``) while
        # the last blocks compute.
        rows: list[Future[dict[EventKind, Merged]]] = [Future() for _ in session.blocks]

        def block(number: int) -> _Block:
            try:
                merged = {k: session.merge(k, number, task.strict) for k in kinds}
            except BaseException as exc:
                rows[number].set_exception(exc)
                raise
            rows[number].set_result(merged)
            return _Block.of(merged, _block_features(task.spec, {k: merged[k] for k in market}))

        computing = [_run(pool, block, number=b) for b in range(len(session.blocks))]
        # The tables and the pack take the blocks' rows as they come (on ``writer``).
        encoding = {k: _run(writer, _encode, rows=rows, kind=k, held=held[k]) for k in kinds}
        packing: Future[PackWriter | None] | None = None
        if computes and task.spec is not None and held_features is not None:
            new_pack = store.pack_writer(
                session=task.session,
                feature_names=task.spec.features,
                label_names=task.spec.label_names,
                layout=task.layout,
            )
            packing = _run(
                writer, _append_blocks, pack=new_pack, blocks=computing, held=held_features
            )
        merged = [r.result() for r in rows]
        events: dict[EventKind, Merge[pa.Table]] = {}
        files: dict[EventKind, list[SourceFile]] = {}  # the input files of each kind
        duplicates = []
        for kind in kinds:
            of_kind = [m[kind] for m in merged]
            duplicates += [m.duplicates for m in of_kind if m.duplicates is not None]
            stored_rows: Counter[str] = Counter()
            for m in of_kind:
                stored_rows.update(m.stored)
            out.stored.update(stored_rows)
            files[kind] = [task.sources[u] for u in sorted(stored_rows)]
            table = pa.concat_tables([m.table for m in of_kind])
            out.events += table.num_rows
            events[kind] = merge_events(table, held[kind].result())
        if duplicates:
            out.duplicates = pa.concat_tables(duplicates)
        out.conflicts = [
            (f"{kind.value} events", symbol) for kind, m in events.items() for symbol in m.conflicts
        ]
        # When nothing can refuse the session (no conflicting events, no stored feature
        # rows to conflict with), its tables' Parquet encoding starts now and runs beside
        # the features, their joining and the writing of the pack.
        written: list[Future[TableRecord]] = []
        early = not out.conflicts and (held_features is None or held_features.result() is None)
        if early:
            written = _write_tables(writer, task, store, stored, events, encoding, files, out)
        blocks = [c.result() for c in computing]
        features = None
        pack = packing.result() if packing is not None else None
        if task.spec is not None and market:
            rows_of = _notes(task, task.spec, market, blocks, out)
            job = _joined(blocks, rows_of) if pack is None else None
            if job is not None and held_features is not None:
                names = (task.spec.features, task.spec.label_names)
                features = merge_features(job, names, held_features.result())
        out.conflicts += [("features", s) for s in (features.conflicts if features else ())]
        if out.conflicts and not task.replace:
            return out  # the job refuses the session: nothing of it is written
        if not early:
            written = _write_tables(writer, task, store, stored, events, encoding, files, out)
        sources = [task.sources[u] for u in sorted(out.stored)]
        if pack is not None and pack.rows and task.spec is not None:
            out.pack = pack.finish(_provenance(sources, ()))
            out.series = len(pack.symbols)
            for b in blocks:
                if b.features is not None:
                    _add_stats(task.spec, b.features.features.ts, b.features.features.values, out)
        elif features is not None and task.spec is not None:
            _pack(task, task.spec, store, stored, features, sources, out)
        out.tables = [w.result() for w in written]
    return out


def _write_tables(
    pool: ThreadPoolExecutor | None,
    task: AssembleTask,
    store: Store,
    stored: StoredSession,
    events: dict[EventKind, Merge[pa.Table]],
    encoding: dict[EventKind, Future[TableEncoder | None]],
    files: dict[EventKind, list[SourceFile]],
    out: AssembleResult,
) -> list[Future[TableRecord]]:
    """Each kind's table of the session on ``pool`` (the published one when it is
    unchanged; the one encoded as the blocks were merged when the job's rows are the
    table); the per-symbol tables they take the place of go to ``out``."""
    written = []
    for kind, merge in events.items():
        published = stored.tables.get(kind.value)
        removed = stored.symbol_table_keys(kind)
        out.removed_tables += removed
        if merge.unchanged and published is not None and not removed:
            written.append(_done(published))
            continue
        kept = stored.sources(kind) if merge.kept else ()
        where = {"kind": kind.value, "symbol": ALL_SYMBOLS, "session": task.session}
        sources = _provenance(files[kind], kept)
        if (encoder := encoding[kind].result()) is not None:
            written.append(
                _run(pool, store.write_encoded_table, **where, encoder=encoder, sources=sources)
            )
        else:
            written.append(
                _run(pool, store.write_table, **where, table=merge.rows, sources=sources)
            )
    return written


def _encode(
    rows: list[Future[dict[EventKind, Merged]]], kind: EventKind, held: Future[pa.Table | None]
) -> TableEncoder | None:
    """The session's table of ``kind``, encoded block by block as the blocks are merged;
    None when the store holds rows of the kind in the session (the table's rows are then
    known only once they are merged with the job's)."""
    if held.result() is not None:
        return None
    encoder = Store.table_encoder(ALL_SYMBOLS)
    for block in rows:
        encoder.append(block.result()[kind].table)
    return encoder


def _pack(
    task: AssembleTask,
    spec: FeatureSpec,
    store: Store,
    stored: StoredSession,
    features: Merge[PackData],
    sources: list[SourceFile],
    out: AssembleResult,
) -> None:
    """The session's pack (the published one when nothing of it changes) and its stats."""
    rows = features.rows
    layout = (task.layout or store.layout).to_dict()
    published = stored.pack
    if features.unchanged and published is not None and dict(published.layout) == layout:
        out.pack = published
    else:
        kept: tuple[SourceFile, ...] = ()
        if features.kept and published is not None:
            kept = published.sources
        elif features.kept:
            kept = tuple(f for s in stored.segments for f in s.sources)
        out.pack = store.write_pack(
            session=task.session,
            symbols=rows.symbols,
            offsets=rows.offsets,
            ts=rows.ts,
            values=rows.values,
            feature_names=spec.features,
            labels=rows.labels,
            label_names=spec.label_names,
            layout=task.layout,
            sources=_provenance(sources, kept),
        )
    out.series = len(rows.symbols)
    _add_stats(spec, rows.ts, rows.values, out)


def _add_stats(
    spec: FeatureSpec,
    ts: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    out: AssembleResult,
) -> None:
    """Add the rows of the spec's stats period to the session's statistics."""
    if spec.stats_period is not None:
        start, end = spec.stats_period
        inside = (ts >= start) & (ts < end)
        if inside.any():
            out.stats.add(values[inside])


def _append_blocks(
    pack: PackWriter, blocks: list[Future[_Block]], held: Future[StoredFeatures | None]
) -> PackWriter | None:
    """The session's pack with each block's feature rows appended as the block is
    computed; None when the store holds feature rows of the session (the pack's rows are
    then known only once they are merged with the job's)."""
    if held.result() is not None:
        return None
    for block in blocks:
        computed = block.result().features
        if computed is None:
            continue
        counts = np.diff(computed.offsets)
        with_rows = np.flatnonzero(counts)
        if with_rows.size:
            pack.append(
                [computed.symbols[i] for i in with_rows.tolist()],
                np.concatenate([[0], np.cumsum(counts[with_rows])]),
                computed.features.ts,
                computed.features.values,
                computed.features.labels,
            )
    return pack


def _provenance(job: list[SourceFile], kept: tuple[SourceFile, ...]) -> list[SourceFile]:
    """The job's input files and those of the stored rows kept beside them, by path."""
    return sorted({*job, *kept}, key=lambda f: (f.path, f.sha256))


def _block_features(
    spec: FeatureSpec | None, market: dict[EventKind, Merged]
) -> SymbolFeatures | None:
    """The features of one block's symbols; None without a spec or rows on its clock."""
    from ticktensor.ingest.features import compute_session_features

    if spec is None or not market:
        return None
    clock_kind = CLOCK_INPUTS[spec.clock][0]
    if clock_kind not in market or market[clock_kind].table.num_rows == 0:
        return None
    # Every market kind of the session, empty ones too, so that a symbol sees the same
    # inputs whichever block it falls in; the symbols as codes, not text.
    return compute_session_features(
        {k: m.table.set_column(m.table.schema.get_field_index("symbol"), "symbol", m.symbols)
         for k, m in market.items()},
        spec,
    )  # fmt: skip


def _pool(threads: int, name: str) -> AbstractContextManager[ThreadPoolExecutor | None]:
    """``threads`` threads named ``name``; none (tasks run at once) for one thread."""
    if threads > 1:
        return ThreadPoolExecutor(threads, thread_name_prefix=name)
    return nullcontext()


def _run(pool: ThreadPoolExecutor | None, fn: Callable[..., R], **kwargs: Any) -> Future[R]:
    """``fn(**kwargs)`` on ``pool``, or now when there is none."""
    if pool is not None:
        return pool.submit(fn, **kwargs)
    return _done(fn(**kwargs))


def _done(result: R) -> Future[R]:
    done: Future[R] = Future()
    done.set_result(result)
    return done


def _notes(
    task: AssembleTask,
    spec: FeatureSpec,
    market: list[EventKind],
    blocks: list[_Block],
    out: AssembleResult,
) -> Counter[str]:
    """The notes per symbol of the session's features (to ``out``) and each symbol's
    feature rows."""
    clock, clock_kind = spec.clock, CLOCK_INPUTS[spec.clock][0]
    present = {k: {s for b in blocks for s in b.merged[k].present} for k in market}
    notes: list[tuple[str, str]] = []  # (symbol, note): listed by symbol, as the report is
    on_clock = present.get(clock_kind, set())
    for symbol in set().union(*present.values()) - on_clock:
        needs = f"the {clock} clock needs {clock_kind.value} events"
        notes.append((symbol, f"{symbol}/{task.session}: events stored, no features ({needs})"))
    rows: Counter[str] = Counter()
    infinite: Counter[str] = Counter()
    for b in blocks:
        rows.update(b.rows)
        infinite.update(b.infinite)
    notes += [
        (symbol, f"{symbol}/{task.session}: no rows on the {clock} clock")
        for symbol in on_clock
        if rows[symbol] == 0
    ]
    for symbol, inf in infinite.items():
        beyond = f"{inf} feature or label value(s) beyond float32's range stored as +/-inf"
        notes.append((symbol, f"{symbol}/{task.session}: {beyond}"))
    out.notes = [n for _, n in sorted(notes)]
    return rows


def _joined(blocks: list[_Block], rows: Counter[str]) -> PackData | None:
    """The job's feature rows of the session, of the symbols with any; None when no
    symbol has feature rows."""
    computed = [b.features for b in blocks if b.features is not None]
    if not computed or sum(rows.values()) == 0:
        return None
    # Blocks are ranges of the sorted symbols: their rows, one after the other, are
    # every symbol's rows in symbol order.
    symbols = tuple(sorted(s for s, n in rows.items() if n))
    return PackData(
        symbols,
        np.concatenate([[0], np.cumsum([rows[s] for s in symbols])]).astype(np.int64),
        _concatenated([p.features.ts for p in computed]),
        _concatenated([p.features.values for p in computed]),
        _concatenated([p.features.labels for p in computed]),
    )


def _concatenated(parts: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
    """The blocks' arrays one after the other; the array itself when there is one."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _infinite(features: FeatureArrays) -> npt.NDArray[np.int64]:
    """Per row: values (features and labels) that are +/-inf, beyond float32's range (or
    infinite already in the events)."""
    per_row = np.zeros(len(features.ts), dtype=np.int64)
    for values in (features.values, features.labels):
        # Summing a row's flags costs several times finding none, the usual case.
        if values.size and np.isinf(values).any():
            per_row += np.isinf(values).sum(axis=1)
    return per_row


def _per_symbol(
    per_row: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """``per_row`` summed over each symbol's rows."""
    total = np.concatenate([[0], np.cumsum(per_row)])
    return np.asarray(total[offsets[1:]] - total[offsets[:-1]], dtype=np.int64)
