"""Phase two of an ingest job: one (symbol, session) from its staged parts -> tables + segment."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.ingest import _quarantine
from ticktensor.ingest._feature_rows import CLOCK_INPUTS
from ticktensor.ingest._staging import Staging, repeated
from ticktensor.schemas import REFERENCE_KINDS, EventKind, FeatureSpec, conform
from ticktensor.store import Layout, SegmentRecord, SourceFile, Store, TableRecord

__all__ = ["AssembleResult", "AssembleTask", "StatsPartial", "assemble"]

_EXTRA = ["_source", "_row"]


@dataclass(frozen=True)
class AssembleTask:
    """Everything a worker needs to assemble one (symbol, session) (picklable)."""

    symbol: str
    session: str
    parts: dict[EventKind, list[str]]
    staging: Staging
    store_url: str
    spec: FeatureSpec | None
    layout: Layout | None
    sources: dict[str, SourceFile]
    strict: bool = False


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
    """What phase two produced for one (symbol, session)."""

    symbol: str
    session: str
    tables: list[TableRecord] = field(default_factory=list)
    segment: SegmentRecord | None = None
    duplicates: pa.Table | None = None
    stored: Counter[str] = field(default_factory=Counter)
    stats: StatsPartial = field(default_factory=StatsPartial)
    note: str | None = None


def _duplicates(table: pa.Table, kind: EventKind) -> npt.NDArray[np.bool_]:
    """Rows identical (in every canonical column) to an earlier row.

    MBO is the exception within one file: several fills of one resting order in one
    exchange packet share every field (order id, price, size, sequence, times), so
    there identical rows are real events and only a copy from another file (overlapping
    downloads) is a duplicate.
    """
    # Rows are sorted by time and duplicates share ts_event: only rows in runs of equal
    # timestamps can be duplicates, usually a small fraction, so hash only those.
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
    canonical = [c for c in df.columns if c not in _EXTRA]
    if kind is EventKind.MBO:
        first_source = pl.col("_source").first().over(canonical)
        flags = df.select((pl.col("_source") != first_source).alias("dup"))["dup"]
    else:
        first = df.select(pl.struct(canonical).is_first_distinct().alias("first"))["first"]
        flags = ~first
    flags_all[idx] = flags.to_numpy()
    return flags_all


def conform_with_extra(table: pa.Table, kind: EventKind, symbol: str) -> pa.Table:
    """The canonical schema plus ``_source``/``_row``.

    Staging leaves out all-null columns and ``symbol`` (one per part, in its path).
    """
    if "symbol" not in table.column_names:
        # A dictionary of one value cast to text: 10x faster than pa.repeat of a string.
        table = table.append_column("symbol", repeated(symbol, table.num_rows).cast(pa.string()))
    extra = [table.column(c) for c in _EXTRA]
    canonical = conform(table.drop_columns(_EXTRA), kind)
    for name, col in zip(_EXTRA, extra, strict=True):
        canonical = canonical.append_column(name, col)
    return canonical


def _source_names(column: pa.ChunkedArray) -> set[str]:
    """The input files a staged ``_source`` column names, read off its dictionaries.

    Every staged part's ``_source`` is a dictionary of the one file it came from, so
    this costs nothing per row (the full-length text cast and distinct count did).
    """
    return {name for chunk in column.chunks for name in chunk.dictionary.to_pylist()}


def _source_as_text(table: pa.Table) -> pa.Table:
    """``_source`` as text: parts' dictionaries differ, and sorting or counting by file
    needs one type across them."""
    index = table.schema.get_field_index("_source")
    return table.set_column(index, "_source", table.column("_source").cast(pa.string()))


def _sorted(table: pa.Table, single_source: bool) -> pa.Table:
    ts = table.column("ts_event").cast(pa.int64()).to_numpy()
    rows = table.column("_row").to_numpy()
    step = np.diff(ts)
    if single_source and np.all((step > 0) | ((step == 0) & (np.diff(rows) > 0))):
        return table  # one file, already in (time, row) order: the usual case
    # One file: its name is the same on every row, so (time, row) orders it (and the
    # column may stay a dictionary); several: they were cast to text to compare.
    keys = ["ts_event", "_row"] if single_source else ["ts_event", "_source", "_row"]
    order = pc.sort_indices(table, [(k, "ascending") for k in keys])
    return table.take(order)


def assemble(task: AssembleTask) -> AssembleResult:
    """Merge a (symbol, session)'s parts, drop cross-file duplicates, write tables + features.

    Every kind becomes a table; features come from the market kinds only. The
    reference kinds (definitions, statistics) pass through to tables: an instrument with
    reference data and no market events gets no segment, and no note says so.
    """
    from ticktensor.ingest._feature_engine import overflowed
    from ticktensor.ingest.features import compute_features

    store = Store.open(task.store_url)
    out = AssembleResult(task.symbol, task.session)
    events: dict[EventKind, pa.Table] = {}
    dup_tables = []
    for kind, rels in sorted(task.parts.items()):
        table = conform_with_extra(task.staging.read(rels), kind, task.symbol)
        sources = _source_names(table.column("_source"))
        if len(sources) > 1:
            table = _source_as_text(table)
        table = _sorted(table, single_source=len(sources) == 1)
        dup = _duplicates(table, kind)
        if dup.any():
            bad = table.filter(pa.array(dup))
            q = _duplicate_entries(kind, bad)
            if task.strict:
                _quarantine.raise_first(q)
            dup_tables.append(q)
            table = table.filter(pa.array(~dup))
        if len(sources) == 1:
            stored = dict.fromkeys(sources, table.num_rows)
        else:
            counts = pc.value_counts(table.column("_source")).to_pylist()
            stored = {c["values"]: c["counts"] for c in counts}
        out.stored.update(stored)
        clean = table.drop_columns(_EXTRA)
        events[kind] = clean
        used = sorted(stored)
        out.tables.append(
            store.write_table(
                kind=kind.value,
                symbol=task.symbol,
                session=task.session,
                table=clean,
                sources=[task.sources[u] for u in used],
            )
        )
    if dup_tables:
        out.duplicates = pa.concat_tables(dup_tables)
    events = {k: t for k, t in events.items() if k not in REFERENCE_KINDS}
    if task.spec is None or not events:
        return out
    clock_kind = CLOCK_INPUTS[task.spec.clock][0]
    if clock_kind not in events:
        out.note = (
            f"{task.symbol}/{task.session}: events stored, no features (the "
            f"{task.spec.clock} clock needs {clock_kind.value} events)"
        )
        return out
    features = compute_features(events, task.spec)
    if features.ts.size == 0:
        out.note = f"{task.symbol}/{task.session}: no rows on the {task.spec.clock} clock"
        return out
    infinite = overflowed(features)
    if infinite:
        out.note = (
            f"{task.symbol}/{task.session}: {infinite} feature or label value(s) beyond "
            "float32's range stored as +/-inf"
        )
    out.segment = store.write_segment(
        symbol=task.symbol,
        session=task.session,
        ts=features.ts,
        values=features.values,
        feature_names=features.feature_names,
        labels=features.labels,
        label_names=features.label_names,
        layout=task.layout,
        sources=[s for t in out.tables for s in t.sources],
    )
    if task.spec.stats_period is not None:
        start, end = task.spec.stats_period
        inside = (features.ts >= start) & (features.ts < end)
        if inside.any():
            out.stats.add(features.values[inside])
    return out


def _duplicate_entries(kind: EventKind, bad: pa.Table) -> pa.Table:
    n = bad.num_rows
    rendered = _quarantine.rows_as_json(bad.drop_columns(_EXTRA), np.arange(n, dtype=np.int64))
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
