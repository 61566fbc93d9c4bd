"""Migration: each session stored as (symbol, session) segments becomes one pack.

:func:`migrate` reads every segment of a session (each checked against its content
hash), writes their rows as one pack, reads the pack back and checks that each symbol's
rows hash to the content hash of the segment they came from, then commits versions that
add the packs and remove the segments (``replace=True``). Older versions keep their
segments, so time travel before the migration still reads them; event tables are left
as they are. A session already stored as a pack has no segments left, so a second run
finds nothing to do and commits nothing. See docs/store-format.md, "Migrating to packs".
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError, SchemaError, StoreCorruptError, VersionConflictError

from ._layout import Codec, Layout
from ._manifest import PackRecord, SegmentRecord
from ._segments import read_checked_segment, segment_content_hash
from ._store import Store
from ._version import SegmentData, StoreVersion

__all__ = ["MigrateReport", "SessionMigration", "migrate"]


@dataclass(frozen=True)
class SessionMigration:
    """One session's segments and the pack that replaces them (``None`` in a dry run)."""

    session: str
    segments: int
    rows: int
    segment_files: int
    segment_bytes: int
    pack: PackRecord | None = None
    #: Segments not in the form ticktensor writes, read (more slowly) through zarr-python.
    read_through_zarr: int = 0

    @property
    def pack_files(self) -> int:
        return 0 if self.pack is None else len(self.pack.files)

    @property
    def pack_bytes(self) -> int:
        return 0 if self.pack is None else self.pack.nbytes


@dataclass
class MigrateReport:
    """What :func:`migrate` did (or, with ``dry_run``, would do).

    ``sessions`` are the sessions packed, in order; ``already_packed`` the number of
    sessions that were packs before; ``versions`` the versions committed (empty when
    nothing changed).
    """

    base_version: int
    dry_run: bool
    sessions: list[SessionMigration] = field(default_factory=list)
    already_packed: int = 0
    versions: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def segments(self) -> int:
        return sum(s.segments for s in self.sessions)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.sessions)

    @property
    def read_through_zarr(self) -> int:
        """Segments read through zarr-python: not in the form ticktensor writes."""
        return sum(s.read_through_zarr for s in self.sessions)


def migrate(
    store: Store,
    *,
    sessions: Iterable[str] | None = None,
    layout: Layout | None = None,
    codec: Codec | str | None = None,
    chunk_rows: int | None = None,
    commit_every: int = 0,
    dry_run: bool = False,
    threads: int = 4,
    on_session: Callable[[SessionMigration], None] | None = None,
) -> MigrateReport:
    """Store every session of the latest version that is held by segments as one pack.

    Parameters
    ----------
    store
        The store to migrate (local or any fsspec URL).
    sessions
        Only these sessions (default: all). A session that is not in the latest
        version is a :class:`~ticktensor.errors.ConfigError`.
    layout
        Codec and inner chunk rows of the packs. Default: the layout the session's
        segments share, or the store's default layout when they differ.
    codec, chunk_rows
        Override one field of that layout and keep the other (``ticktensor migrate
        --codec`` / ``--chunk-rows``).
    commit_every
        Sessions per commit; ``0`` (the default) commits the whole run as one version,
        so the store holds either every segment or every pack. A positive number keeps
        the work of a long run in steps: a run that stops resumes where it stopped.
    dry_run
        Read nothing but the version's records, write nothing: report what would change.
    threads
        Threads reading segments (a few segments per task).
    on_session
        Called after each session is packed and checked (or listed, in a dry run).

    Every commit is based on the version the run read (or its own previous commit):
    if another writer commits meanwhile, :class:`~ticktensor.errors.VersionConflictError`
    is raised and nothing is lost; rerunning packs what is still segments.

    Examples
    --------
    >>> import numpy as np
    >>> from ticktensor.store import Store, migrate
    >>> from ticktensor.store.testing import write_segment
    >>> store = Store.create("memory://migrate-example", exist_ok=True)
    >>> segs = [
    ...     write_segment(
    ...         store, symbol=s, session="2024-01-02", ts=np.arange(3, dtype=np.int64),
    ...         values=np.ones((3, 1), np.float32), feature_names=["ret"])
    ...     for s in ("A", "B")]
    >>> _ = store.commit(segments=segs)
    >>> report = migrate(store)
    >>> [(s.session, s.segments, s.rows) for s in report.sessions], report.versions
    ([('2024-01-02', 2, 6)], [2])
    >>> migrate(store).versions  # nothing left to pack: no new version
    []
    """
    if isinstance(commit_every, bool) or not isinstance(commit_every, int) or commit_every < 0:
        raise ConfigError(f"commit_every must be an integer >= 0, got {commit_every!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"threads must be a positive integer, got {threads!r}")
    started = time.perf_counter()
    base = store.version()
    report = MigrateReport(base_version=base.version, dry_run=dry_run)
    report.already_packed = len(base.packs)
    by_session = _sessions_to_pack(store, base, sessions)
    pending: list[PackRecord] = []
    latest = base.version
    pool = ThreadPoolExecutor(threads, thread_name_prefix="ticktensor-migrate")
    try:
        reads = _read_ahead(base, [] if dry_run else list(by_session.values()), pool)
        for session, records in by_session.items():
            _check_names(session, records)
            item = SessionMigration(
                session=session,
                segments=len(records),
                rows=sum(r.rows for r in records),
                segment_files=sum(len(r.files) for r in records),
                segment_bytes=sum(r.nbytes for r in records),
            )
            if not dry_run:
                chosen = _layout_for(store, records, layout, codec, chunk_rows)
                pack, slow = _pack_session(store, base, session, records, next(reads), chosen)
                item = dataclasses.replace(item, pack=pack, read_through_zarr=slow)
                pending.append(pack)
            report.sessions.append(item)
            if on_session is not None:
                on_session(item)
            if commit_every and len(pending) >= commit_every:
                latest = _commit(store, pending, latest, report)
                pending = []
    finally:
        pool.shutdown(cancel_futures=True)  # a failed session drops the reads queued after it
    if pending:
        _commit(store, pending, latest, report)
    report.seconds = time.perf_counter() - started
    return report


def _sessions_to_pack(
    store: Store, base: StoreVersion, sessions: Iterable[str] | None
) -> dict[str, list[SegmentRecord]]:
    """The segments of each session to pack (``sessions``, or all), in session order."""
    by_session = _segments_by_session(base.segments)
    if sessions is None:
        return by_session
    wanted = list(dict.fromkeys(sessions))
    packed = {p.session for p in base.packs}
    unknown = [s for s in wanted if s not in by_session and s not in packed]
    if unknown:
        raise ConfigError(
            f"{store.location.display('')}: version {base.version} has no session "
            f"{', '.join(map(repr, unknown))}"
        )
    return {s: by_session[s] for s in wanted if s in by_session}


def _segments_by_session(
    segments: Sequence[SegmentRecord],
) -> dict[str, list[SegmentRecord]]:
    """Segments grouped by session (sessions sorted), each group in symbol order."""
    out: dict[str, list[SegmentRecord]] = {}
    for rec in sorted(segments, key=lambda r: (r.session, r.symbol)):
        out.setdefault(rec.session, []).append(rec)
    return out


def _check_names(session: str, records: Sequence[SegmentRecord]) -> None:
    """The segments of a session must share feature and label names (a pack has one set)."""
    first = records[0]
    for rec in records[1:]:
        if (rec.feature_names, rec.label_names) != (first.feature_names, first.label_names):
            raise SchemaError(
                f"session {session}: segment {rec.symbol} has features {list(rec.feature_names)} "
                f"and labels {list(rec.label_names)}, segment {first.symbol} has "
                f"{list(first.feature_names)} and {list(first.label_names)}; the segments of "
                "one pack must share them"
            )


def _layout_for(
    store: Store,
    records: Sequence[SegmentRecord],
    layout: Layout | None,
    codec: Codec | str | None,
    chunk_rows: int | None,
) -> Layout:
    base = layout or _shared_layout(records) or store.layout
    return dataclasses.replace(
        base,
        codec=Codec(codec) if codec is not None else base.codec,
        chunk_rows=chunk_rows if chunk_rows is not None else base.chunk_rows,
    )


def _shared_layout(records: Sequence[SegmentRecord]) -> Layout | None:
    shared = {tuple(sorted(r.layout.items())) for r in records}
    if len(shared) == 1:
        try:
            return Layout.from_dict(dict(records[0].layout))
        except (KeyError, TypeError, ValueError):
            pass  # a malformed layout failed to open already; the store's default is safe
    return None


def _pack_session(
    store: Store,
    base: StoreVersion,
    session: str,
    records: Sequence[SegmentRecord],
    reads: Sequence[Future[list[tuple[SegmentData, bool]]]],
    layout: Layout,
) -> tuple[PackRecord, int]:
    """Write the session's segments (as ``reads`` of ``records`` deliver them) as one
    pack, read it back and check it; the pack, and how many segments zarr-python read."""
    read = [r for batch in reads for r in batch.result()]
    data = [d for d, _ in read]
    slow = sum(through_zarr for _, through_zarr in read)
    label_names = records[0].label_names
    offsets = np.concatenate([[0], np.cumsum([r.rows for r in records])]).astype(np.int64)
    labels = None
    if label_names:
        labels = np.concatenate([_labels(d, r) for d, r in zip(data, records, strict=True)])
    sources = tuple(dict.fromkeys(s for r in records for s in r.sources))  # once each
    pack = store.write_pack(
        session=session,
        symbols=[r.symbol for r in records],
        offsets=offsets,
        ts=np.concatenate([d.ts for d in data]),
        values=np.concatenate([d.values for d in data]),
        labels=labels,
        feature_names=records[0].feature_names,
        label_names=label_names,
        layout=layout,
        sources=sources,
    )
    del read, data, labels
    _check_pack(base, pack, records)
    return pack, slow


#: Segments per task of the reading pool: enough to outweigh handing a task over.
_BATCH = 16


def _read_ahead(
    base: StoreVersion, sessions: Sequence[Sequence[SegmentRecord]], pool: ThreadPoolExecutor
) -> Iterator[list[Future[list[tuple[SegmentData, bool]]]]]:
    """The reads of each session's segments, in order, ``_BATCH`` segments per task; the
    next session's are queued before a session's are handed out, so the pool reads it
    while that session is packed."""
    queued: deque[list[Future[list[tuple[SegmentData, bool]]]]] = deque()
    for records in sessions:
        queued.append(
            [
                pool.submit(_read_segments, base, records[i : i + _BATCH])
                for i in range(0, len(records), _BATCH)
            ]
        )
        if len(queued) == 2:
            yield queued.popleft()
    yield from queued


def _read_segments(
    base: StoreVersion, records: Sequence[SegmentRecord]
) -> list[tuple[SegmentData, bool]]:
    """The segments, in order (one task of the reading pool)."""
    return [_read_segment(base, r) for r in records]


def _read_segment(base: StoreVersion, record: SegmentRecord) -> tuple[SegmentData, bool]:
    """The segment, each chunk checked against its sha256 and the rows against the
    content hash: decoded here, or through zarr-python (the flag says so) when it is
    not in the form ticktensor writes."""
    rows = read_checked_segment(base.location, record)
    if rows is None:
        return base.read_segment(record, verify=True), True
    return SegmentData(*rows), False


def _labels(data: SegmentData, record: SegmentRecord) -> npt.NDArray[np.float32]:
    if data.labels is None:
        raise StoreCorruptError(
            f"segment {record.symbol}/{record.session}: labels {list(record.label_names)} "
            "are recorded but the segment has no labels array"
        )
    return data.labels


def _check_pack(base: StoreVersion, pack: PackRecord, records: Sequence[SegmentRecord]) -> None:
    """Read ``pack`` back (every chunk against its hash, the whole against the pack's
    content hash) and check that each symbol's rows hash to its segment's content hash:
    the pack holds exactly what the published segments held."""
    data = base.read_pack(pack, verify=True)
    for i, rec in enumerate(records):
        lo, hi = int(data.offsets[i]), int(data.offsets[i + 1])
        again = segment_content_hash(
            rec.symbol,
            rec.session,
            data.ts[lo:hi],
            data.values[lo:hi],
            None if data.labels is None else data.labels[lo:hi],
            rec.feature_names,
            rec.label_names,
            Layout.from_dict(dict(rec.layout)),
        )
        if data.symbols[i] != rec.symbol or again != rec.content_hash:
            raise StoreCorruptError(
                f"pack {pack.session} ({base.location.display(pack.path)}): rows {lo}:{hi} of "
                f"{data.symbols[i]} do not hash to segment {rec.symbol}/{rec.session}'s content "
                f"hash ({again[:16]} != {rec.content_hash[:16]}); the pack was not committed"
            )


def _commit(store: Store, packs: Sequence[PackRecord], based_on: int, report: MigrateReport) -> int:
    sessions = [p.session for p in packs]
    what = sessions[0] if len(sessions) == 1 else f"{sessions[0]} .. {sessions[-1]}"
    try:
        version = store.commit(
            packs=packs,
            replace=True,
            base_version=based_on,
            message=f"migrate {len(packs)} session(s) from segments to packs: {what}",
        )
    except VersionConflictError as exc:
        raise VersionConflictError(
            f"{exc}; another writer committed while migrate ran: run migrate again "
            "(sessions already packed are skipped)"
        ) from exc
    if version.version != based_on:
        report.versions.append(version.version)
    return version.version
