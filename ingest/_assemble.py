"""Phase two of an ingest job: one session of every symbol -> one table per kind + one pack."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from ticktensor.ingest._feature_engine import SymbolFeatures
from ticktensor.ingest._feature_rows import CLOCK_INPUTS
from ticktensor.ingest._handoff import Handoff
from ticktensor.ingest._merge import StagedSession
from ticktensor.ingest._partition import Partition
from ticktensor.ingest._session_blocks import (
    BlockSummary,
    TakenFeatures,
    TakenRows,
    block_features,
    joined_features,
    take_features,
    take_rows,
)
from ticktensor.ingest._session_stats import StatsPartial
from ticktensor.ingest._staging import Staging, repeated
from ticktensor.ingest._stored import (
    STORED_SOURCE,
    Merge,
    StoredFeatures,
    StoredSession,
    carried_rows,
    merge_events,
    merge_features,
    preceding_rows,
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
    StoreVersion,
    TableEncoder,
    TableRecord,
)

__all__ = [
    "BLOCK_ROWS",
    "INLINE_ROWS",
    "AssembleResult",
    "AssembleTask",
    "assemble",
]

R = TypeVar("R")

BLOCK_ROWS = 1 << 18
"""Rows (of every kind) a session is merged and computed in at once. Small blocks keep
the arrays (and polars' intermediates) of a block small enough that the next block
reuses their memory instead of taking fresh pages the kernel must clear."""

INLINE_ROWS = 1 << 15
"""Rows (of every kind) of a session assembled on its task's thread alone: below this,
starting the threads that would overlap merging, encoding and writing costs more than
the overlap saves."""


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
    #: The store's partition: ``session`` is a day, a month, a year or all time.
    partition: Partition = "day"
    #: Sessions of at most this many rows (every kind) are assembled on the task's thread.
    inline_rows: int = INLINE_ROWS
    #: The job's store and the version it builds on, when the task runs in the job's
    #: process (not opened again); None in a worker process, which opens them.
    opened: tuple[Store, StoreVersion] | None = None


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
    store, base = task.opened or _open(task)
    stored = task.stored or StoredSession(task.session)
    out = AssembleResult(task.session)
    kinds = sorted(task.parts)
    market = [k for k in kinds if k not in REFERENCE_KINDS]
    spec = task.spec if market else None
    # A stored partition of many days: the stored rows of the job's symbols on the days
    # the job has none of them are carried in, so each symbol's series is whole.
    partial = task.partition != "day" and task.stored is not None
    held_rows = {k: stored.events(base, k) for k in kinds} if partial else {}
    parts = task.parts if task.partition == "day" else _joined_parts(task)
    parts, before, carried = _carry(task, parts, held_rows) if partial else (parts, {}, 0)
    # The kinds the features read that the job has no rows of: their stored rows of the
    # job's symbols are read beside the job's (their tables stay as they are).
    read = _read_only(spec, kinds, stored, base)
    session = StagedSession(task.staging, parts, task.block_rows, before, read)
    inputs = sorted([*market, *read])  # the kinds the features are computed from
    blocks = len(session.blocks)
    # A small session (a partition of daily bars, a day of a few symbols) is merged and
    # computed on this thread, its blocks before anything takes them: its steps take less
    # than starting the threads that would overlap them. This thread also reads the stored
    # feature rows first (a read beside the merge only waits for the GIL the merge holds);
    # one thread beside it writes the tables while this one writes the pack.
    inline = session.rows <= task.inline_rows
    writers = 1 if inline else task.threads + len(kinds) + 1
    with (
        ExitStack() as cleanup,  # exits last: after the pools' tasks are done
        _pool(1 if inline else task.threads, "ticktensor-session") as pool,
        # Besides the task's threads, one per table and one for the pack (always threads:
        # the blocks may wait for them): they mostly wait for the blocks.
        ThreadPoolExecutor(writers, thread_name_prefix="ticktensor-tables") as writer,
        ExitStack() as stop,  # exits first: a taker waiting for a block that never comes
    ):  # fmt: skip
        held = {
            k: _done(held_rows[k]) if partial else _run(pool, stored.events, version=base, kind=k)
            for k in kinds
        }
        reader = None if inline else pool
        held_features = _run(reader, stored.features, version=base) if spec else _done(None)
        # A block hands its rows over before it computes their features: the tables
        # take them (on ``writer``) while the block computes. A handoff holds a few
        # blocks at most: a block far ahead of what its table or pack has taken waits
        # (inline, every block is computed before anything takes them).
        ahead = blocks if inline else 2 * task.threads + 1
        rows_of = {k: Handoff[pa.Table](blocks, ahead) for k in kinds}
        features_of = Handoff[SymbolFeatures | None](blocks, ahead)
        for handoff in [*rows_of.values(), features_of]:
            stop.callback(handoff.close)  # (the blocks' failure, or one on this thread)

        def take() -> tuple[dict[EventKind, Future[TakenRows]], Future[TakenFeatures] | None]:
            """Each kind's table and the pack taking the blocks, on ``writer``."""
            encoders = {k: store.table_encoder(ALL_SYMBOLS) for k in kinds}
            for encoder in encoders.values():
                cleanup.callback(encoder.close)  # its working file, unless the table is written
            taken = {
                k: _run(writer, _take_rows, rows=rows_of[k], encoder=encoders[k], held=held[k])
                for k in kinds
            }
            if spec is None:
                features_of.close()  # nothing takes them
                return taken, None
            # Stored feature rows of the session: the blocks' features are merged with
            # them and written as one pack at the end, and no pack is written as they come.
            new_pack = None
            if stored.pack is None and not stored.segments:
                new_pack = store.pack_writer(
                    session=task.session,
                    feature_names=spec.features,
                    label_names=spec.label_names,
                    layout=task.layout,
                    threads=0,  # the blocks' threads keep the cores busy meanwhile
                )
                cleanup.callback(new_pack.close)  # what it stored, unless it finished
            pack = _run(
                writer,
                _take_features,
                rows=features_of,
                pack=new_pack,
                spec=spec,
                held=held_features,
            )
            return taken, pack

        def block(number: int) -> BlockSummary:
            handoffs: list[Handoff[Any]] = [*rows_of.values(), features_of]
            try:
                merged = {k: session.merge(k, number, task.strict) for k in [*kinds, *read]}
                for k in kinds:
                    rows_of[k].put(number, merged[k].table)
                handoffs = [features_of]
                features = block_features(spec, {k: merged[k] for k in inputs})
            except BaseException as exc:
                for handoff in handoffs:
                    handoff.fail(number, exc)
                raise
            features_of.put(number, features)
            return BlockSummary.of(merged, features)

        if inline:
            computing = [_run(None, block, number=b) for b in range(blocks)]
            taken, pack = take()
        else:
            # The tables and the pack take the blocks first: a block may wait for them.
            taken, pack = take()
            computing = [_run(pool, block, number=b) for b in range(blocks)]
        summaries = [c.result() for c in computing]
        events: dict[EventKind, Merge[pa.Table] | TableEncoder] = {}
        files: dict[EventKind, list[SourceFile]] = {}  # the input files of each kind
        duplicates = []
        for kind in kinds:
            of_kind = [b.kinds[kind] for b in summaries]
            duplicates += [m.duplicates for m in of_kind if m.duplicates is not None]
            stored_rows: Counter[str] = Counter()
            for m in of_kind:
                stored_rows.update(m.stored)
            stored_rows.pop(STORED_SOURCE, None)  # carried rows: the store's, not the job's
            out.stored.update(stored_rows)
            out.events += sum(stored_rows.values())
            files[kind] = [task.sources[u] for u in sorted(stored_rows)]
            kind_rows = taken[kind].result()
            events[kind] = kind_rows.encoder or merge_events(
                pa.concat_tables(kind_rows.tables),
                held[kind].result(),
                partial=partial,
                preceded=kind in before,
            )
        if duplicates:
            out.duplicates = pa.concat_tables(duplicates)
        out.conflicts = [
            (f"{kind.value} events", symbol)
            for kind, m in events.items()
            if isinstance(m, Merge)
            for symbol in m.conflicts
        ]
        # When nothing can refuse the session (no conflicting events, no stored feature
        # rows to conflict with), its tables are written now, beside the pack's rows.
        written: list[Future[TableRecord]] = []
        early = not out.conflicts and held_features.result() is None
        if early:
            written = _write_tables(writer, task, store, stored, events, files, out, carried)
        features = None
        computed = pack.result() if pack is not None else None
        if spec is not None and computed is not None:
            rows = _notes(task, spec, inputs, summaries, out)
            job = joined_features(computed.parts, rows) if computed.pack is None else None
            if job is not None:
                names = (spec.features, spec.label_names)
                features = merge_features(job, names, held_features.result(), partial=partial)
        out.conflicts += [("features", s) for s in (features.conflicts if features else ())]
        if out.conflicts and not task.replace:
            return out  # the job refuses the session: nothing of it is written
        if not early:
            written = _write_tables(writer, task, store, stored, events, files, out, carried)
        sources = [task.sources[u] for u in sorted(out.stored)]
        # The input files of the stored rows the features read beside the job's.
        sources += [f for k in read for f in stored.sources(k)]
        if computed is not None and computed.pack is not None and computed.pack.rows:
            out.pack = computed.pack.finish(_provenance(sources, ()))
            out.series = len(computed.pack.symbols)
            out.stats = computed.stats
        elif features is not None and spec is not None:
            _pack(task, spec, store, stored, features, sources, out, carried)
        out.tables = [w.result() for w in written]
    return out


def _open(task: AssembleTask) -> tuple[Store, StoreVersion]:
    """The task's store and the version its job builds on, opened by the task."""
    store = Store.open(task.store_url)
    return store, store.version(task.base_version)


def _joined_parts(task: AssembleTask) -> dict[EventKind, list[str]]:
    """A partition's parts of each kind joined into one, in input order.

    A partition of many days (of data with few rows per day) has a part per day of each
    input file's batch: thousands of parts of a few rows, which the merge would gather
    from one at a time. Parts of more than ``task.block_rows`` rows in all (a partition
    of intraday data, chosen explicitly) stay as they are: joining them would copy them.
    """
    parts: dict[EventKind, list[str]] = {}
    for kind, rels in task.parts.items():
        parts[kind] = []
        # One part per input file: a part's rows come from one file (see _merge).
        for tag, of_file in itertools.groupby(rels, key=_file_tag):
            group = list(of_file)
            staged = task.staging.read(group) if len(group) > 1 else None
            if staged is None or staged.num_rows > task.block_rows:
                parts[kind] += group
                continue
            task.staging.release(group)
            joined = staged.combine_chunks()
            parts[kind].append(task.staging.write_part(kind, task.session, tag, joined))
    return parts


def _file_tag(rel: str) -> str:
    """The input file's tag of a staged part (``<file>-<batch>.arrow``)."""
    return rel.rsplit("/", 1)[-1].split("-", 1)[0]


def _carry(
    task: AssembleTask, parts: dict[EventKind, list[str]], held: dict[EventKind, pa.Table | None]
) -> tuple[dict[EventKind, list[str]], dict[EventKind, pa.Table], int]:
    """The stored rows the task carries in (see
    :func:`~ticktensor.ingest._stored.carried_rows`), and how many they are: per kind,
    those that come before every row of the job (days appended after the stored ones)
    as they are, for the merge to put in front of the job's rows; others as one more
    staged part of ``parts``."""
    parts, before, carried = dict(parts), {}, 0
    for kind, rels in parts.items():
        stored = held.get(kind)
        if stored is None or stored.num_rows == 0:
            continue
        job = [task.staging.read([rel]) for rel in rels]
        preceding = preceding_rows(job, stored)
        if preceding is not None:
            if preceding.num_rows:
                before[kind] = preceding
            carried += preceding.num_rows
            continue
        rows = carried_rows(job, stored)
        if rows.num_rows == 0:
            continue
        symbol = rows.schema.get_field_index("symbol")
        rows = rows.set_column(
            symbol, "symbol", rows.column(symbol).dictionary_encode().combine_chunks()
        )
        rows = rows.append_column("_row", pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        rows = rows.append_column("_source", repeated(STORED_SOURCE, rows.num_rows))
        # Tagged after every input file's parts: ties in time keep the input's order.
        rel = task.staging.write_part(kind, task.session, "~stored", rows)
        parts[kind] = [*rels, rel]
        carried += rows.num_rows
    return parts, before, carried


def _read_only(
    spec: FeatureSpec | None, kinds: list[EventKind], stored: StoredSession, version: StoreVersion
) -> dict[EventKind, pa.Table]:
    """The stored rows of the session of each kind ``spec`` reads and the job (of
    ``kinds``) has no rows of: the features of the job's symbols are computed from every
    kind they read, as one ingest of all the session's files computes them (a day of
    quotes appended to a partition of quotes and trades still joins the stored trades)."""
    if spec is None:
        return {}
    wanted = [k for k in CLOCK_INPUTS[spec.clock] if k is not None and k not in kinds]
    rows = {k: stored.events(version, k) for k in wanted}
    return {k: table for k, table in rows.items() if table is not None and table.num_rows}


def _take_rows(
    rows: Handoff[pa.Table], encoder: TableEncoder, held: Future[pa.Table | None]
) -> TakenRows:
    try:
        return take_rows(rows, encoder, held.result())
    finally:
        rows.close()  # the blocks do not wait for a taker that stopped


def _take_features(
    rows: Handoff[SymbolFeatures | None],
    pack: PackWriter | None,
    spec: FeatureSpec,
    held: Future[StoredFeatures | None],
) -> TakenFeatures:
    try:
        return take_features(rows, pack, spec, held.result())
    finally:
        rows.close()  # the blocks do not wait for a taker that stopped


def _write_tables(
    pool: ThreadPoolExecutor | None,
    task: AssembleTask,
    store: Store,
    stored: StoredSession,
    events: dict[EventKind, Merge[pa.Table] | TableEncoder],
    files: dict[EventKind, list[SourceFile]],
    out: AssembleResult,
    carried: int,
) -> list[Future[TableRecord]]:
    """Each kind's table of the session on ``pool``: the one encoded as the blocks came
    when the job's rows are the table, else the job's rows merged with the stored ones
    (the published table when they are unchanged); the per-symbol tables they take the
    place of go to ``out``."""
    written = []
    for kind, rows in events.items():
        published = stored.tables.get(kind.value)
        removed = stored.symbol_table_keys(kind)
        out.removed_tables += removed
        where = {"kind": kind.value, "symbol": ALL_SYMBOLS, "session": task.session}
        if isinstance(rows, TableEncoder):
            sources = _provenance(files[kind], ())
            written.append(
                _run(pool, store.write_encoded_table, **where, encoder=rows, sources=sources)
            )
        elif rows.unchanged and published is not None and not removed:
            written.append(_done(published))
        else:
            kept = rows.kept or carried
            sources = _provenance(files[kind], stored.sources(kind) if kept else ())
            written.append(_run(pool, store.write_table, **where, table=rows.rows, sources=sources))
    return written


def _pack(
    task: AssembleTask,
    spec: FeatureSpec,
    store: Store,
    stored: StoredSession,
    features: Merge[PackData],
    sources: list[SourceFile],
    out: AssembleResult,
    carried: int,
) -> None:
    """The session's pack (the published one when nothing of it changes) and its stats."""
    rows = features.rows
    layout = (task.layout or store.layout).to_dict()
    published = stored.pack
    if features.unchanged and published is not None and dict(published.layout) == layout:
        out.pack = published
    else:
        kept: tuple[SourceFile, ...] = ()
        if (features.kept or carried) and published is not None:
            kept = published.sources
        elif features.kept or carried:
            kept = tuple(f for s in stored.segments for f in s.sources)
        # A small pack's chunks are encoded and hashed on this thread (threads of its own
        # would take longer to start): what Store.write_pack does, without its threads.
        small = rows.ts.shape[0] <= task.inline_rows
        writer = store.pack_writer(
            session=task.session,
            feature_names=spec.features,
            label_names=spec.label_names,
            layout=task.layout,
            **({"threads": 0} if small else {}),
        )
        writer.append(rows.symbols, rows.offsets, rows.ts, rows.values, rows.labels)
        out.pack = writer.finish(_provenance(sources, kept))
    out.series = len(rows.symbols)
    out.stats.add_period(spec, rows.ts, rows.values)


def _provenance(job: list[SourceFile], kept: tuple[SourceFile, ...]) -> list[SourceFile]:
    """The job's input files and those of the stored rows kept beside them, by path."""
    return sorted({*job, *kept}, key=lambda f: (f.path, f.sha256))


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
    blocks: list[BlockSummary],
    out: AssembleResult,
) -> Counter[str]:
    """The notes per symbol of the session's features (to ``out``) and each symbol's
    feature rows."""
    clock, clock_kind = spec.clock, CLOCK_INPUTS[spec.clock][0]
    present = {k: {s for b in blocks for s in b.kinds[k].present} for k in market}
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
