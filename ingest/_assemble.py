"""Phase two of an ingest job: one session of every symbol -> one table per kind + one pack."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.ingest._feature_engine import FeatureArrays
from ticktensor.ingest._feature_rows import CLOCK_INPUTS
from ticktensor.ingest._merge import Merged, merge_parts
from ticktensor.ingest._staging import Staging
from ticktensor.schemas import REFERENCE_KINDS, EventKind, FeatureSpec
from ticktensor.store import Layout, PackRecord, SourceFile, Store, TableRecord

__all__ = ["ALL_SYMBOLS", "AssembleResult", "AssembleTask", "StatsPartial", "assemble"]

R = TypeVar("R")

ALL_SYMBOLS = "*"
"""The ``symbol`` of an event table's key when the table holds every symbol of its session
(its ``symbol`` column says whose each row is)."""


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
    strict: bool = False
    #: Threads the task may keep busy (the job's workers it has to itself).
    threads: int = 1


@dataclass
class StatsPartial:
    """Mergeable float64 sums for per-feature mean/std over the training period."""

    count: int = 0
    total: npt.NDArray[np.float64] | None = None
    total_sq: npt.NDArray[np.float64] | None = None

    def add(self, values: npt.NDArray[np.float32]) -> None:
        v = values.astype(np.float64)
        v = np.where(np.isfinite(v), v, 0.0)
        s, sq = v.sum(axis=0), (v * v).sum(axis=0)
        self.total = s if self.total is None else self.total + s
        self.total_sq = sq if self.total_sq is None else self.total_sq + sq
        self.count += values.shape[0]

    def merge(self, other: StatsPartial) -> None:
        if other.total is not None and other.total_sq is not None:
            self.total = other.total if self.total is None else self.total + other.total
            self.total_sq = (
                other.total_sq if self.total_sq is None else self.total_sq + other.total_sq
            )
            self.count += other.count

    def mean_std(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        if self.total is None or self.total_sq is None or self.count == 0:
            raise ValueError("no rows fell in the statistics period")
        mean = self.total / self.count
        var = np.maximum(self.total_sq / self.count - mean * mean, 0.0)
        return mean, np.sqrt(var)


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
    #: Event rows stored (every kind) and symbols with feature rows in the pack.
    events: int = 0
    series: int = 0


def assemble(task: AssembleTask) -> AssembleResult:
    """Merge a session's parts, drop cross-file duplicates, write its tables and its pack.

    Every kind becomes one table of every symbol, sorted by (symbol, time); features
    come from the market kinds only, for all symbols at once, and are written as one
    pack. The reference kinds (definitions, statistics) pass through to tables: an
    instrument with reference data and no market events gets no rows in the pack, and
    no note says so. With ``task.threads > 1`` the tables are encoded (Parquet, zstd)
    while the features are computed.
    """
    store = Store.open(task.store_url)
    out = AssembleResult(task.session)
    events: dict[EventKind, Merged] = {}
    duplicates = []
    for kind, rels in sorted(task.parts.items()):
        merged = events[kind] = merge_parts(task.staging, rels, kind, task.strict)
        if merged.duplicates is not None:
            duplicates.append(merged.duplicates)
        out.stored.update(merged.stored)
        out.events += merged.table.num_rows
    if duplicates:
        out.duplicates = pa.concat_tables(duplicates)
    with (
        ThreadPoolExecutor(max(1, task.threads - 1), thread_name_prefix="ticktensor-session")
        if task.threads > 1
        else nullcontext() as pool
    ):
        written = [
            _run(
                pool,
                store.write_table,
                kind=kind.value,
                symbol=ALL_SYMBOLS,
                session=task.session,
                table=merged.table,
                sources=[task.sources[u] for u in sorted(merged.stored)],
            )
            for kind, merged in events.items()
        ]
        market = {k: m for k, m in events.items() if k not in REFERENCE_KINDS}
        if task.spec is not None and market:
            _features(task, task.spec, store, market, out)
        out.tables = [w.result() for w in written]
    return out


def _run(pool: ThreadPoolExecutor | None, fn: Callable[..., R], **kwargs: Any) -> Future[R]:
    """``fn(**kwargs)`` on ``pool``, or now when there is none."""
    if pool is not None:
        return pool.submit(fn, **kwargs)
    done: Future[R] = Future()
    done.set_result(fn(**kwargs))
    return done


def _features(
    task: AssembleTask,
    spec: FeatureSpec,
    store: Store,
    market: dict[EventKind, Merged],
    out: AssembleResult,
) -> None:
    """The session's features of every symbol: notes per symbol, the pack, the stats."""
    from ticktensor.ingest.features import compute_session_features

    clock, clock_kind = spec.clock, CLOCK_INPUTS[spec.clock][0]
    notes: list[tuple[str, str]] = []  # (symbol, note): listed by symbol, as the report is
    on_clock = set(market[clock_kind].present) if clock_kind in market else set()
    for symbol in set().union(*(m.present for m in market.values())) - on_clock:
        needs = f"the {clock} clock needs {clock_kind.value} events"
        notes.append((symbol, f"{symbol}/{task.session}: events stored, no features ({needs})"))
    if not on_clock:
        out.notes = [n for _, n in sorted(notes)]
        return
    # The symbols as codes into the session's names: no text compared per row.
    computed = compute_session_features(
        {k: m.table.set_column(m.table.schema.get_field_index("symbol"), "symbol", m.symbols)
         for k, m in market.items()},
        spec,
    )  # fmt: skip
    features = computed.features
    rows = np.diff(computed.offsets)
    infinite = _per_symbol(_infinite(features), computed.offsets)
    for symbol, n, inf in zip(computed.symbols, rows.tolist(), infinite.tolist(), strict=True):
        if n == 0 and symbol in on_clock:
            notes.append((symbol, f"{symbol}/{task.session}: no rows on the {clock} clock"))
        if inf:
            beyond = f"{inf} feature or label value(s) beyond float32's range stored as +/-inf"
            notes.append((symbol, f"{symbol}/{task.session}: {beyond}"))
    out.notes = [n for _, n in sorted(notes)]
    if features.ts.size == 0:
        return
    kept = rows > 0  # a symbol with no rows on the clock is not in the pack
    out.pack = store.write_pack(
        session=task.session,
        symbols=[s for s, keep in zip(computed.symbols, kept.tolist(), strict=True) if keep],
        offsets=np.concatenate([[0], np.cumsum(rows[kept])]).astype(np.int64),
        ts=features.ts,
        values=features.values,
        feature_names=features.feature_names,
        labels=features.labels,
        label_names=features.label_names,
        layout=task.layout,
        sources=[task.sources[u] for u in sorted(out.stored)],
    )
    out.series = int(kept.sum())
    if spec.stats_period is not None:
        start, end = spec.stats_period
        inside = (features.ts >= start) & (features.ts < end)
        if inside.any():
            out.stats.add(features.values[inside])


def _infinite(features: FeatureArrays) -> npt.NDArray[np.int64]:
    """Per row: values (features and labels) that are +/-inf, beyond float32's range (or
    infinite already in the events)."""
    per_row = np.asarray(np.isinf(features.values).sum(axis=1), dtype=np.int64)
    if features.labels.size:
        per_row += np.isinf(features.labels).sum(axis=1)
    return per_row


def _per_symbol(
    per_row: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """``per_row`` summed over each symbol's rows."""
    total = np.concatenate([[0], np.cumsum(per_row)])
    return np.asarray(total[offsets[1:]] - total[offsets[:-1]], dtype=np.int64)
