"""The ingest job: input files -> validated events, features and one new store version."""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from ticktensor.errors import ConfigError, TickTensorError, VersionConflictError
from ticktensor.ingest._assemble import (
    BLOCK_ROWS,
    INLINE_ROWS,
    AssembleResult,
    AssembleTask,
    assemble,
)
from ticktensor.ingest._convert import ConvertTask, FileResult, convert_file
from ticktensor.ingest._engines import make_engine
from ticktensor.ingest._partition import (
    Partition,
    PartitionChoice,
    check_choice,
    choose_partition,
    partition_label,
)
from ticktensor.ingest._quarantine import QUARANTINE_SCHEMA, first_messages
from ticktensor.ingest._session_stats import StatsPartial
from ticktensor.ingest._sources import Input, expand_inputs
from ticktensor.ingest._staging import Staging, group_parts
from ticktensor.ingest._stored import StoredSession
from ticktensor.ingest.readers import (
    book_update_columns,
    detect,
    get_reader,
    kind_from_columns,
    layout_hint,
)
from ticktensor.ingest.readers._base import ReadOptions
from ticktensor.schemas import EventKind, FeatureSpec
from ticktensor.store import (
    FeatureStats,
    Layout,
    Location,
    PackRecord,
    SourceFile,
    Store,
    StoreVersion,
    TableRecord,
)

__all__ = ["FileReport", "IngestOptions", "IngestResult", "ingest", "validate_inputs"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class IngestOptions:
    """Options of ``ticktensor ingest`` (see ``ticktensor ingest --help``).

    Parameters
    ----------
    format
        A reader name or ``"auto"`` (detect from content and name).
    read
        What readers get: the schema wanted, the symbol of files without one, batch
        size and the CSV mapping.
    spec
        The feature spec; ``None`` reuses the store's, else a default for the data.
    layout
        Codec and chunking of new segments; ``None`` keeps the store's default.
    workers
        Tasks run at once: files in phase one, sessions (of every symbol) in phase two.
    engine
        ``local``: threads of this process (the heavy work releases the GIL);
        ``processes``: spawned worker processes, for readers whose decoding holds the
        GIL; ``ray``: Ray tasks (on the cluster at ``RAY_ADDRESS``, else on a local Ray
        started for the job).
    ts_range
        The declared ``[start, end)`` of the data in ns UTC: rows outside are quarantined.
    stats_period
        ``[start, end)`` in ns UTC over which the normalization statistics are computed
        (the training period); replaces the feature spec's ``stats_period``, and is kept
        with the spec in the store, so later ingests use it too.
    partition
        The period a pack holds: ``day`` (a UTC day, the session of intraday data),
        ``month``, ``year`` or ``all`` (one pack for all time); ``auto`` picks from the
        data's rows per day (see :mod:`ticktensor.ingest._partition`). A store's first
        ingest records its partition and later ones reuse it; asking for another is a
        ``ConfigError``.
    replace
        Let the job's rows of a symbol in a session supersede other rows the store holds
        of it (of a kind, or features), and a session an older ticktensor stored as one
        segment per symbol become one pack. Either way the symbols of a session the job
        has no rows of keep their stored rows.
    """

    format: str = "auto"
    read: ReadOptions = field(default_factory=ReadOptions)
    spec: FeatureSpec | None = None
    layout: Layout | None = None
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    engine: Literal["local", "processes", "ray"] = "local"
    strict: bool = False
    ts_range: tuple[int, int] | None = None
    stats_period: tuple[int, int] | None = None
    replace: bool = False
    message: str = ""
    partition: PartitionChoice = "auto"

    def __post_init__(self) -> None:
        check_choice(self.partition)
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}")
        if self.ts_range is not None and not self.ts_range[0] < self.ts_range[1]:
            raise ConfigError(f"ts_range start must be before end, got {self.ts_range}")
        if self.stats_period is not None and not self.stats_period[0] < self.stats_period[1]:
            raise ConfigError(f"stats_period start must be before end, got {self.stats_period}")


@dataclass
class FileReport:
    """One input file's outcome; ``rows_read == rows_stored + rows_quarantined``."""

    file: str
    format: str
    schema: str | None
    rows_read: int
    rows_stored: int
    rows_quarantined: int
    seconds: float
    bytes: int = 0
    rules: dict[str, int] = field(default_factory=dict)
    note: str | None = None
    #: How the reader mapped the file: ``{"columns": {canonical: source}, "notes": [...]}``.
    inference: dict[str, Any] | None = None
    #: The first quarantine message of each rule of ``rules``: an example of each reason.
    examples: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class IngestResult:
    """The whole job: per-file reports, the version published, and timings.

    ``packs`` is the number of partitions with feature rows (one pack each, new or
    already stored), ``series`` the number of (symbol, partition) pairs in them;
    ``partition`` is the store's partition (day, month, year or all).
    """

    files: list[FileReport]
    version: StoreVersion
    published: bool
    packs: int
    series: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    partition: Partition = "day"

    @property
    def rows_read(self) -> int:
        return sum(f.rows_read for f in self.files)

    @property
    def rows_stored(self) -> int:
        return sum(f.rows_stored for f in self.files)

    @property
    def rows_quarantined(self) -> int:
        return sum(f.rows_quarantined for f in self.files)


def infer_csv_kind(source: Input, read: ReadOptions) -> EventKind:
    """The schema of a generic CSV with a header, from its column names (and mapping).

    Raises
    ------
    ConfigError
        For a header of order-book updates (never read as trades), or one that names
        no schema: with the ``--delimiter``/``--no-header`` the first line asks for, else
        ``--schema``.
    """
    first = source.head(1 << 16).lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0]
    line = first.decode("utf-8", "replace").strip()
    header = [c.strip().strip('"') for c in line.split(read.csv.delimiter)]
    if marks := book_update_columns(header):
        raise ConfigError(
            f"{source.url}: the header {header} is one of order-book updates (one price "
            f"level per row, with {marks}), not trades; Binance futures depth files "
            "(update_type snap/set) are read by --format binance, other book updates need "
            "converting to mbp10 or mbo"
        )
    kind = kind_from_columns(header, read.csv.columns)
    if kind is None:
        hint = layout_hint(line, read.csv.delimiter, read.csv.header)
        fix = hint or "; pass --schema trades|quotes|mbp10|mbo|bars"
        if "--no-header" in hint:
            fix += "; a file without a header also needs --schema (and --columns NAME=INDEX,...)"
        raise ConfigError(f"{source.url}: cannot tell the schema from the header {header}{fix}")
    return kind


def _plan(inputs: list[Input], fmt: str) -> tuple[list[tuple[Input, str]], list[FileReport]]:
    """Pick a reader per input; skip companions read with another input (LOBSTER books)."""
    names = {i.name for i in inputs}
    planned, skipped = [], []
    for source in inputs:
        reader = get_reader(fmt) if fmt != "auto" else detect(source)
        companion_of = getattr(type(reader), "companion_of", None)
        partner = companion_of(source.name) if companion_of is not None else None
        if partner is not None:
            if partner not in names:
                raise ConfigError(
                    f"{source.url}: read together with {partner}, which is not an input"
                )
            skipped.append(
                FileReport(
                    source.url,
                    reader.name,
                    None,
                    0,
                    0,
                    0,
                    0.0,
                    source.size,
                    note=f"read together with {partner}",
                )
            )
            continue
        planned.append((source, reader.name))
    return planned, skipped


#: Input bytes per worker below which starting a process pool costs more than it saves
#: (each spawned worker imports pyarrow, polars and zarr: about a second of CPU).
MIN_BYTES_PER_WORKER = 32 << 20


def _engine(
    options: IngestOptions, planned: list[tuple[Input, str]], out: str
) -> tuple[Literal["local", "processes", "ray"], int]:
    """The engine kind and worker count for this job (writing to the store ``out``)."""
    if options.engine == "local":
        # Threads share this process (memory:// included) and start in microseconds: each
        # phase keeps as many busy as it has tasks (files, then (symbol, session) pairs).
        return "local", options.workers
    in_memory = out.startswith("memory://") or any(
        s.url.startswith("memory://") for s, _ in planned
    )
    if in_memory:
        return "local", 1  # memory:// is private to this process: run inline
    if options.engine == "ray":
        return "ray", options.workers
    total = sum(s.size for s, _ in planned)
    return "processes", max(1, min(options.workers, len(planned), total // MIN_BYTES_PER_WORKER))


def ingest(
    inputs: Sequence[str],
    out: str,
    options: IngestOptions | None = None,
    *,
    progress: bool = True,
) -> IngestResult:
    """Convert ``inputs`` (paths, globs, fsspec URLs) into a new version of the store ``out``.

    Nothing is lost: every row read is stored or quarantined (kind ``quarantine`` tables
    name the file, row, rule and raw text), and the per-file counts add up. The version
    is published once, at the end; a crash leaves the previous version intact.
    """
    options = options or IngestOptions()
    t0 = time.perf_counter()
    sources = expand_inputs(list(inputs))
    planned, reports = _plan(sources, options.format)
    store = Store.create(out, layout=options.layout, exist_ok=True)
    kind, workers = _engine(options, planned, store.url)
    staging = _staging(store.location, kind)
    try:
        with make_engine(kind, workers) as engine:
            files = _phase_convert(engine, planned, staging, options, progress)
            current = store.version()  # the latest: what the job builds on, read once
            partition = _partition(current, options, files)
            if not options.replace:
                _check_unpacked(current, files, partition)
            spec = _spec(current, options, files)
            results = _phase_assemble(
                engine,
                workers,
                files,
                staging,
                store,
                current,
                spec,
                options,
                partition,
                progress,
                in_process=kind == "local",
            )
        version, published, examples = _publish(
            store, current, files, results, spec, staging, options, partition
        )
    finally:
        staging.remove()
    dups: Counter[str] = Counter()
    for r in results:
        if r.duplicates is not None:
            dups.update(r.duplicates.column("source").to_pylist())
    stored: Counter[str] = Counter()
    for r in results:
        stored.update(r.stored)
    for f in files:
        quarantined = f.rows_quarantined + dups[f.file]
        if stored[f.file] != f.rows_read - quarantined:  # the "nothing lost" invariant
            raise TickTensorError(
                f"{f.file}: {f.rows_read} rows read but {stored[f.file]} stored and "
                f"{quarantined} quarantined; this is a bug, please report it"
            )
        rules = dict(f.rules)
        if dups[f.file]:
            rules["duplicate"] = rules.get("duplicate", 0) + dups[f.file]
        reports.append(
            FileReport(
                f.file,
                f.format,
                f.schema,
                f.rows_read,
                stored[f.file],
                quarantined,
                f.seconds,
                f.bytes,
                rules,
                inference=f.inference,
                examples=examples.get(f.file, {}),
            )
        )
    reports.sort(key=lambda r: r.file)
    return IngestResult(
        files=reports,
        version=version,
        published=published,
        packs=sum(r.pack is not None for r in results),
        series=sum(r.series for r in results),
        seconds=time.perf_counter() - t0,
        notes=[n for r in sorted(results, key=lambda r: r.session) for n in r.notes]
        + _stats_notes(version, spec),
        partition=partition,
    )


def validate_inputs(
    inputs: Sequence[str],
    out: str,
    options: IngestOptions | None = None,
    *,
    progress: bool = True,
) -> list[FileReport]:
    """What :func:`ingest` would keep and quarantine of each input, publishing nothing.

    The job's first phase alone: every file is read and validated as ``ingest`` reads
    it, its rows staged below the store ``out``'s ``staging/`` area, which is removed
    before returning (on a local disk an empty ``staging/`` folder stays); no version is
    written, and ``out`` need not be a store yet. ``rows_stored`` counts the rows that pass
    validation: duplicates are found later, when a job assembles each session
    across files, so a full ingest may quarantine some of them.
    """
    options = options or IngestOptions()
    planned, reports = _plan(expand_inputs(list(inputs)), options.format)
    kind, workers = _engine(options, planned, out)
    staging = _staging(Location(out), kind)
    try:
        with make_engine(kind, workers) as engine:
            files = _phase_convert(engine, planned, staging, options, progress)
    finally:
        staging.remove()
    reports += [
        FileReport(
            f.file,
            f.format,
            f.schema,
            f.rows_read,
            f.rows_kept,
            f.rows_quarantined,
            f.seconds,
            f.bytes,
            dict(f.rules),
            inference=f.inference,
        )
        for f in files
    ]
    return sorted(reports, key=lambda r: r.file)


#: Bytes of staged parts a job on the local engine keeps in memory (more go to disk): a
#: session of a few million rows skips writing its parts and mapping them back, while a
#: file larger than RAM still converts with bounded memory.
STAGING_MEMORY_BYTES = 1 << 30


def _staging(location: Location, engine: str) -> Staging:
    """The job's staging area: parts in memory up to a budget when its tasks share this
    process, on disk only when they run in other processes."""
    return Staging(location, _job_id(), STAGING_MEMORY_BYTES if engine == "local" else 0)


def _job_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def _phase_convert(
    engine: Any,
    planned: list[tuple[Input, str]],
    staging: Staging,
    options: IngestOptions,
    progress: bool,
) -> list[FileResult]:
    tasks = []
    for i, (source, reader) in enumerate(planned):
        read = options.read
        if reader == "csv" and read.kind is None and read.csv.header:
            read = replace(read, kind=infer_csv_kind(source, read))
        tasks.append(
            ConvertTask(source, reader, read, staging, f"{i:05d}", options.ts_range, options.strict)
        )
    total = sum(s.size for s, _ in planned)
    files: list[FileResult] = []
    t0 = time.perf_counter()
    with tqdm(
        total=len(tasks), unit="file", desc="ingest: read + validate", disable=not progress or None
    ) as bar:
        rows = done_bytes = 0
        for res in engine.map_unordered(convert_file, tasks):
            files.append(res)
            rows += res.rows_read
            done_bytes += res.bytes
            rate = done_bytes / max(time.perf_counter() - t0, 1e-9) / 1e6
            bar.set_postfix_str(f"{rows:,} rows, {rate:,.1f} MB/s of {total / 1e6:,.1f} MB")
            bar.update(1)
    return files


def _spec(
    current: StoreVersion, options: IngestOptions, files: list[FileResult]
) -> FeatureSpec | None:
    spec = _base_spec(current, options, files)
    if spec is None or options.stats_period is None:
        return spec
    return replace(spec, stats_period=options.stats_period)


def _base_spec(
    current: StoreVersion, options: IngestOptions, files: list[FileResult]
) -> FeatureSpec | None:
    from ticktensor.ingest.features import default_spec

    if options.spec is not None:
        return options.spec
    existing = current.manifest.attributes.get("feature_spec")
    if existing:
        spec: FeatureSpec = FeatureSpec.from_dict(existing)
        return spec
    # Every kind staged counts: a mixed file's report names none of its kinds.
    kinds = {kind for f in files for _, kind, _ in f.parts}
    kinds |= {EventKind(f.schema) for f in files if f.schema not in (None, "mixed")}
    try:
        return default_spec(kinds) if kinds else None
    except ConfigError:
        return None  # e.g. MBO only: events are stored, features need a spec (--features)


def _partition(current: StoreVersion, options: IngestOptions, files: list[FileResult]) -> Partition:
    """The job's partition: the one ``current`` records, else the option's, else chosen
    from the rows per symbol of the job's days.

    A store with sessions and no recorded partition was written before partitions were
    recorded: its sessions are days.
    """
    recorded = current.manifest.attributes.get("partition")
    events = (t for t in current.tables if t.kind != "quarantine")
    if recorded is None and (current.packs or current.segments or next(events, None)):
        recorded = "day"
    days = [d for f in files for d in f.days]
    return choose_partition(options.partition, days, stored=recorded)


def _check_unpacked(current: StoreVersion, files: list[FileResult], partition: Partition) -> None:
    """Refuse, before any work, sessions an older ticktensor stored as per-symbol segments.

    A job writes a session as one pack; committing it for a session that has segments
    would conflict at the end of the job, after all the work.
    """
    sessions = {partition_label(session, partition) for f in files for session, _, _ in f.parts}
    old = sorted({s.session for s in current.segments} & sessions)
    if not old:
        return
    example = next(s for s in current.segments if s.session == old[0])
    more = f" and {len(old) - 1} more" if len(old) > 1 else ""
    raise VersionConflictError(
        f"session {old[0]}{more} is stored as one segment per symbol (e.g. "
        f"{example.symbol}/{example.session} in version {current.version}), as an older "
        "ticktensor wrote it; an ingest writes a session of every symbol as one pack, which "
        "takes the place of those segments: pass replace=True to supersede it"
    )


def _check_sessions(base: int, results: list[AssembleResult]) -> None:
    """Refuse sessions whose stored rows of a symbol of the job differ from the job's,
    naming the session, what of it differs and the symbols."""
    refused = sorted((r for r in results if r.conflicts), key=lambda r: r.session)
    if not refused:
        return
    first, more = refused[0], len(refused) - 1
    whats = {what for what, _ in first.conflicts}  # "<kind> events" or "features"
    differ = sorted(whats - {"features"}) + (["features"] if "features" in whats else [])
    symbols = sorted({symbol for _, symbol in first.conflicts})
    named = f"symbol {symbols[0]}" + (f" and {len(symbols) - 1} more" if len(symbols) > 1 else "")
    raise VersionConflictError(
        f"session {first.session}{f' (and {more} more)' if more else ''} already exists in "
        f"version {base} with other content (its {' and '.join(differ)} differ), for "
        f"{named}; pass replace=True to supersede it"
    )


def _check_quarantine(current: StoreVersion, tables: list[TableRecord]) -> None:
    """Refuse a quarantine table of an input file the store holds with other content
    (its duplicates depend on the job's other files)."""
    published = {t.key: t.path for t in current.tables}
    changed = [t for t in tables if published.get(t.key, t.path) != t.path]
    if changed:
        raise VersionConflictError(
            f"the quarantine of {changed[0].symbol} already exists in version "
            f"{current.version} with other content; pass replace=True to supersede it"
        )


def _phase_assemble(
    engine: Any,
    workers: int,
    files: list[FileResult],
    staging: Staging,
    store: Store,
    current: StoreVersion,
    spec: FeatureSpec | None,
    options: IngestOptions,
    partition: Partition,
    progress: bool,
    *,
    in_process: bool,
) -> list[AssembleResult]:
    """Each session's task on ``engine``; tasks ``in_process`` (threads of this process)
    share the job's ``store`` and ``current`` version instead of opening them again."""
    provenance = {f.file: SourceFile(path=f.file, sha256=f.sha256, bytes=f.bytes) for f in files}
    # A partition is a coarser session: its parts are those of its days.
    groups = group_parts(
        [(partition_label(day, partition), kind, rel) for f in files for day, kind, rel in f.parts]
    )
    stored = StoredSession.of(current, groups)
    # Fewer sessions than workers: each session's task keeps the spare ones busy too.
    threads = max(1, workers // max(1, min(workers, len(groups))))
    tasks = [
        AssembleTask(
            session,
            parts,
            staging,
            store.url,
            spec,
            options.layout,
            provenance,
            current.version,
            stored.get(session),
            options.replace,
            options.strict,
            threads,
            BLOCK_ROWS,
            partition,
            INLINE_ROWS,
            (store, current) if in_process else None,
        )
        for session, parts in groups.items()
    ]
    out = []
    with tqdm(
        total=len(tasks),
        unit="session",
        desc="ingest: sessions",
        disable=not progress or None,
    ) as bar:
        events = series = 0
        for res in engine.map_unordered(assemble, tasks):
            out.append(res)
            events += res.events
            series += res.series
            bar.set_postfix_str(f"{events:,} rows, {series:,} symbol-sessions")
            bar.update(1)
    return out


def _publish(
    store: Store,
    current: StoreVersion,
    files: list[FileResult],
    results: list[AssembleResult],
    spec: FeatureSpec | None,
    staging: Staging,
    options: IngestOptions,
    partition: Partition,
) -> tuple[StoreVersion, bool, dict[str, dict[str, str]]]:
    """Commit the job's packs and tables; also the first quarantine message of each
    rule, per input file."""
    base = current.version
    if not options.replace:
        _check_sessions(base, results)
    tables = [t for r in results for t in r.tables]
    dup_by_source: dict[str, list[pa.Table]] = {}
    for r in results:
        if r.duplicates is not None:
            for src in set(r.duplicates.column("source").to_pylist()):
                dup_by_source.setdefault(src, []).append(
                    r.duplicates.filter(pc.equal(r.duplicates.column("source"), src))
                )
    examples: dict[str, dict[str, str]] = {}
    for f in files:
        parts = [staging.read([f.quarantine])] if f.quarantine else []
        parts += dup_by_source.get(f.file, [])
        if not parts:
            continue
        q = pa.concat_tables([p.cast(QUARANTINE_SCHEMA) for p in parts])
        # Sorted, so the table (and its hash) does not depend on which task finished first.
        q = q.sort_by([("row", "ascending"), ("rule", "ascending"), ("column", "ascending")])
        examples[f.file] = first_messages(q)
        tables.append(
            store.write_table(
                kind="quarantine",
                symbol=os.path.basename(f.file) or f.file,
                session=f.sha256[:16] or "unhashed",
                table=q,
                sources=[SourceFile(f.file, f.sha256, f.bytes)],
            )
        )
    packs = [r.pack for r in results if r.pack is not None]
    if not options.replace:
        _check_quarantine(current, [t for t in tables if t.kind == "quarantine"])
    stats = _stats(store, packs, results, spec)
    # The sessions' tables and packs hold the stored rows of the symbols the job has
    # none of, and the job's rows where they equal the stored ones (or replace them by
    # request): they take the place of the published ones.
    version = store.commit(
        packs=packs,
        tables=tables,
        stats=stats,
        attributes={
            "partition": partition,
            **({} if spec is None else {"feature_spec": spec.to_dict()}),
        },
        message=options.message or f"ingest {len(files)} file(s)",
        base_version=base,
        replace=True,
        remove_tables=[key for r in results for key in r.removed_tables],
    )
    return version, version.version != base, examples


def _stats_notes(version: StoreVersion, spec: FeatureSpec | None) -> list[str]:
    """A note when the declared stats period gave the version no statistics of its own."""
    if spec is None or spec.stats_period is None:
        return []
    start, end = spec.stats_period
    if version.stats is not None and version.stats.period == (start, end):
        return []
    kept = (
        "no normalization statistics"
        if version.stats is None
        else "the statistics of period " + " .. ".join(map(_iso, version.stats.period))
    )
    return [
        f"no feature rows fall in the stats period {_iso(start)} .. {_iso(end)} (end "
        f"exclusive): version {version.version} has {kept}"
    ]


def _iso(ns: int) -> str:
    return (EPOCH + timedelta(microseconds=ns // 1000)).isoformat().replace("+00:00", "Z")


def _stats(
    store: Store, packs: list[PackRecord], results: list[AssembleResult], spec: FeatureSpec | None
) -> FeatureStats | None:
    """Per-feature mean/std over the declared training period, old and new sessions."""
    if spec is None or spec.stats_period is None or not packs:
        return None
    start, end = spec.stats_period
    total = StatsPartial()
    for r in sorted(results, key=lambda r: r.session):  # not in the order tasks finished
        total.merge(r.stats)
    new = {p.session for p in packs}  # the job's packs take the place of what these held
    current = store.version()
    for seg in current.select(start=start, end=end):
        if seg.session in new:
            continue
        data = current.read_segment(seg)
        inside = (data.ts >= start) & (data.ts < end)
        if inside.any():
            total.add(data.values[inside])
    for pack in current.packs:
        if pack.session in new or pack.ts_end < start or pack.ts_start >= end:
            continue
        rows = current.read_pack(pack)
        inside = (rows.ts >= start) & (rows.ts < end)
        if inside.any():
            total.add(rows.values[inside])
    if total.count == 0:
        return current.stats
    mean, std = total.mean_std()
    return FeatureStats(
        names=packs[0].feature_names,
        mean=tuple(mean.tolist()),
        std=tuple(std.tolist()),
        count=total.count,
        period=(start, end),
    )
