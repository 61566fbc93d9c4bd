"""The store: create, open, write segments, packs and tables, commit versions atomically."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.errors import (
    ConfigError,
    FormatVersionError,
    StoreCorruptError,
    StoreError,
    StoreNotFoundError,
    VersionConflictError,
    VersionNotFoundError,
)

from ._history import (
    CACHE,
    StateCache,
    checkpoint_path,
    checkpoint_problems,
    entry_path,
    parent_sha256,
    read_state,
)
from ._layout import Layout
from ._location import Location
from ._log import CheckpointRef, LogEntry, RemovedRecord
from ._manifest import (
    ALL_SYMBOLS,
    FORMAT_VERSION,
    HEADER_BYTES,
    POINTER_BYTES,
    READABLE_FORMAT_VERSIONS,
    FeatureStats,
    FileEntry,
    Manifest,
    PackRecord,
    SegmentRecord,
    SourceFile,
    TableRecord,
    load_json,
    sha256_hex,
)
from ._pack_writer import PackWriter
from ._packs import read_pack_index
from ._repair import RepairReport
from ._repair import repair as repair_store
from ._state import VersionState
from ._tables import (
    ROW_GROUP_ROWS,
    SESSION_ROW_GROUP_ROWS,
    TableEncoder,
    write_table,
)
from ._verify import VerifyReport, verify_manifest
from ._version import StoreVersion

__all__ = ["Store"]

STORE_FILE = "ticktensor.json"
POINTER_FILE = "latest.json"
LOCK_FILE = ".lock"
#: Versions between two checkpoints of the full state, unless the store says otherwise.
CHECKPOINT_EVERY = 10


class Store:
    """A versioned ticktensor store on a local directory or any fsspec URL.

    Writers add immutable packs (one session of every symbol) and tables, then
    :meth:`commit` publishes a new version: the manifest is written first, the
    ``latest.json`` pointer is replaced last and atomically. Readers pin a version with
    :meth:`version`. Segments of the legacy layout (one per symbol and session) are
    read as they are; :mod:`ticktensor.store.testing` writes them for compatibility
    tests.

    Examples
    --------
    >>> import numpy as np
    >>> from ticktensor.store import Store
    >>> store = Store.create("memory://doc-example", exist_ok=True)
    >>> pack = store.write_pack(
    ...     session="2024-01-02", symbols=["AAPL", "MSFT"], offsets=[0, 4, 6],
    ...     ts=np.array([0, 1, 2, 3, 0, 1], np.int64), values=np.ones((6, 2), np.float32),
    ...     feature_names=["ret", "spread"])
    >>> store.commit(packs=[pack], message="first day").version
    1
    """

    def __init__(
        self, location: Location, layout: Layout, checkpoint_every: int = CHECKPOINT_EVERY
    ) -> None:
        self._location = location
        self._layout = layout
        self._checkpoint_every = _checkpoint_every(checkpoint_every, "checkpoint_every")
        self._latest_state: VersionState | None = None  # the newest state this handle read

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        url: str,
        *,
        layout: Layout | None = None,
        storage_options: Mapping[str, Any] | None = None,
        exist_ok: bool = False,
        checkpoint_every: int = CHECKPOINT_EVERY,
    ) -> Store:
        """Create an empty store (version 0) at ``url``; ``layout`` is its default layout.

        Every ``checkpoint_every``-th version also writes the full state as a checkpoint,
        so that opening any version reads one checkpoint and at most that many small
        log entries (docs/store-format.md). An existing store keeps its own setting.
        """
        location = Location(str(url), dict(storage_options or {}))
        checkpoint_every = _checkpoint_every(checkpoint_every, "checkpoint_every")
        if location.exists(STORE_FILE):
            if not exist_ok:
                raise StoreError(f"{location.display('')}: a store already exists here")
            store = cls.open(url, storage_options=storage_options)
            if location.exists(POINTER_FILE):
                return store
        layout = layout or Layout()
        with location.lock(LOCK_FILE):
            empty = LogEntry(
                version=0,
                parent=None,
                parent_sha256=None,
                created=_now(),
                message="create store",
                feature_names=(),
                label_names=(),
            )
            data = empty.to_json()
            location.write_atomic(entry_path(0), data)
            header = {
                "format": "ticktensor.store",
                "format_version": FORMAT_VERSION,
                "created": empty.created,
                "layout": layout.to_dict(),
                "checkpoint_every": checkpoint_every,
            }
            location.write_atomic(STORE_FILE, _dumps(header))
            location.write_atomic(POINTER_FILE, _pointer(0, sha256_hex(data)))
        return cls(location, layout, checkpoint_every)

    @classmethod
    def open(cls, url: str, *, storage_options: Mapping[str, Any] | None = None) -> Store:
        """Open an existing store for reading and writing."""
        location = Location(str(url), dict(storage_options or {}))
        where = location.display(STORE_FILE)
        try:
            data = location.read_bytes(STORE_FILE, limit=HEADER_BYTES)
        except FileNotFoundError:
            raise StoreNotFoundError(
                f"{location.display('')}: no ticktensor store here (missing {STORE_FILE}); "
                "create one with Store.create or `ticktensor demo --out`"
            ) from None
        header = load_json(data, where, "store header")
        if not isinstance(header, dict) or header.get("format") != "ticktensor.store":
            raise StoreCorruptError(f"{where}: not a ticktensor store")
        header_version = header.get("format_version")
        if isinstance(header_version, bool) or header_version not in READABLE_FORMAT_VERSIONS:
            raise FormatVersionError(
                f"{where}: store format version {header.get('format_version')!r}; "
                f"this ticktensor reads {_versions_text()}"
            )
        try:
            every = _checkpoint_every(header.get("checkpoint_every", CHECKPOINT_EVERY), where)
        except ConfigError as exc:
            raise StoreCorruptError(str(exc)) from None
        return cls(location, _layout(header.get("layout"), where), every)

    @property
    def url(self) -> str:
        return self._location.url

    @property
    def location(self) -> Location:
        return self._location

    @property
    def layout(self) -> Layout:
        """The default layout new segments get."""
        return self._layout

    @property
    def format_version(self) -> int:
        """The format of the latest version (1 for a store no format-2 writer appended to)."""
        return int(self._read_pointer().get("format_version") or 1)

    @property
    def checkpoint_every(self) -> int:
        """Versions between two checkpoints of the full state."""
        return self._checkpoint_every

    # -- reading -----------------------------------------------------------------------

    def latest_version(self) -> int:
        """The number of the latest published version (0 for an empty store)."""
        return int(self._read_pointer()["version"])

    def version(self, version: int | None = None) -> StoreVersion:
        """A read-only view pinned to ``version`` (default: the latest).

        The latest version's file must match the hash in ``latest.json``, and each
        file read below it the hash its child recorded. Opening reads a checkpoint and
        at most ``checkpoint_every`` log entries, and checks that checkpoint against the
        log (the checkpoint before it and the entries between: about twice the work);
        the latest state is kept, so opening it again costs one read of ``latest.json``.
        """
        if version is None:
            return StoreVersion.of_state(self._location, self._latest())
        return StoreVersion.of_state(self._location, self._pin(version))

    def _pin(
        self, version: int | None, *, check_hash: bool = True, cache: StateCache = CACHE
    ) -> VersionState:
        pointer = self._read_pointer()
        latest = int(pointer["version"])
        if version is None:
            version = latest
        if not 0 <= version <= latest:
            raise VersionNotFoundError(
                f"{self._location.display('')}: version {version} does not exist "
                f"(versions 0..{latest})"
            )
        vouched = check_hash and version == latest  # the pointer's hash vouches for it
        expected = str(pointer["sha256"]) if vouched else None
        return read_state(self._location, version, expected, vouched_by=POINTER_FILE, cache=cache)

    def versions(self) -> list[Manifest]:
        """Every published version's manifest, oldest first."""
        return [self._pin(v, check_hash=False).manifest for v in range(self.latest_version() + 1)]

    def _read_pointer(self) -> dict[str, Any]:
        where = self._location.display(POINTER_FILE)
        try:
            data = self._location.read_bytes(POINTER_FILE, limit=POINTER_BYTES)
        except FileNotFoundError:
            raise StoreCorruptError(f"{where}: version pointer is missing") from None
        pointer = load_json(data, where, "version pointer")
        version = pointer.get("version") if isinstance(pointer, dict) else None
        digest = pointer.get("sha256") if isinstance(pointer, dict) else None
        if (
            not isinstance(version, int)
            or isinstance(version, bool)
            or version < 0
            or not isinstance(digest, str)
            or len(digest) != 64
        ):
            raise StoreCorruptError(
                f"{where}: version pointer is malformed (needs a version >= 0 and a sha256)"
            )
        pointed = pointer.get("format_version")
        if isinstance(pointed, bool) or pointed not in (None, *READABLE_FORMAT_VERSIONS):
            raise FormatVersionError(
                f"{where}: pointer format version {pointer.get('format_version')!r}; "
                f"this ticktensor reads {_versions_text()}"
            )
        return dict(pointer)

    def _latest(self) -> VersionState:
        """The latest state: once this handle has read it, one read of ``latest.json``.

        Kept per handle (time travel to old versions cannot evict it) and shared
        through the process cache; a newer pointer costs the entries since.
        """
        return self._state_at(self._read_pointer())

    def _state_at(self, pointer: Mapping[str, Any]) -> VersionState:
        """The state ``pointer`` names, resuming from the newest one this handle read."""
        known = self._latest_state
        version, digest = int(pointer["version"]), str(pointer["sha256"])
        if known is None or known.version != version or known.sha256 != digest:
            known = read_state(self._location, version, digest, known=known)
            self._latest_state = known
        return known

    # -- writing -----------------------------------------------------------------------

    def write_pack(
        self,
        *,
        session: str,
        symbols: Sequence[str],
        offsets: npt.ArrayLike,
        ts: npt.NDArray[np.int64],
        values: npt.NDArray[np.float32],
        feature_names: Sequence[str],
        labels: npt.NDArray[np.float32] | None = None,
        label_names: Sequence[str] = (),
        layout: Layout | None = None,
        sources: Sequence[SourceFile] = (),
    ) -> PackRecord:
        """Write one session of every symbol as a pack; visible at the next :meth:`commit`.

        Rows are sorted by (symbol, ts): ``symbols`` sorted and distinct, symbol ``i``
        holding rows ``offsets[i]:offsets[i+1]``. A pack identical to the latest
        version's pack of the session writes nothing and returns the published record.
        Correcting one symbol's day means writing the session's pack again and
        committing it with ``replace=True`` (copy-on-write; docs/store-format.md).
        """
        writer = self.pack_writer(
            session=session, feature_names=feature_names, label_names=label_names, layout=layout
        )
        writer.append(symbols, offsets, ts, values, labels)
        return writer.finish(sources)

    def pack_writer(
        self,
        *,
        session: str,
        feature_names: Sequence[str],
        label_names: Sequence[str] = (),
        layout: Layout | None = None,
        threads: int = 2,
    ) -> PackWriter:
        """A writer of the session's pack taking its rows a block of symbols at a time
        (see :class:`PackWriter`): :meth:`write_pack` for rows that come in blocks.
        ``threads`` encode and hash its chunks (0: the appending thread, when other
        threads keep the cores busy)."""
        published = self._latest().packs.get((session,))
        return PackWriter(
            self._location,
            session=session,
            feature_names=feature_names,
            label_names=label_names,
            layout=layout or self._layout,
            published=lambda path: published if published and published.path == path else None,
            threads=threads,
        )

    def write_table(
        self,
        *,
        kind: str,
        symbol: str,
        session: str,
        table: pa.Table,
        sources: Sequence[SourceFile] = (),
    ) -> TableRecord:
        """Write one event (or quarantine) table; it becomes visible at the next commit.

        A table identical to one of the latest version is not written again. A table of
        every symbol of a session (``symbol=ALL_SYMBOLS``, rows sorted by symbol) is
        written in row groups of 65,536 rows, whose ``symbol`` statistics let readers
        select symbols; other tables in row groups of 1 M rows.
        """
        encoder = self.table_encoder(symbol)
        encoder.append(table)
        return self.write_encoded_table(
            kind=kind, symbol=symbol, session=session, encoder=encoder, sources=sources
        )

    def table_encoder(self, symbol: str) -> TableEncoder:
        """An encoder of a table of ``symbol`` (or of every symbol: ``ALL_SYMBOLS``), to
        append its rows a part at a time and store it with :meth:`write_encoded_table`;
        close it if it is not written (see :class:`TableEncoder`)."""
        return TableEncoder(
            SESSION_ROW_GROUP_ROWS if symbol == ALL_SYMBOLS else ROW_GROUP_ROWS,
            location=self._location,
        )

    def write_encoded_table(
        self,
        *,
        kind: str,
        symbol: str,
        session: str,
        encoder: TableEncoder,
        sources: Sequence[SourceFile] = (),
    ) -> TableRecord:
        """:meth:`write_table` of the rows appended to ``encoder`` (which it finishes)."""
        published = self._latest().tables.get((kind, symbol, session))
        return write_table(
            self._location,
            kind=kind,
            symbol=symbol,
            session=session,
            encoder=encoder,
            data=encoder.finish(),
            sources=sources,
            published=lambda path: published if published and published.path == path else None,
        )

    def commit(
        self,
        *,
        segments: Iterable[SegmentRecord] = (),
        tables: Iterable[TableRecord] = (),
        packs: Iterable[PackRecord] = (),
        stats: FeatureStats | None = None,
        attributes: Mapping[str, Any] | None = None,
        message: str = "",
        base_version: int | None = None,
        replace: bool = False,
        remove_tables: Iterable[tuple[str, str, str]] = (),
    ) -> StoreVersion:
        """Publish a new version: the latest one plus ``segments``, ``packs`` and ``tables``.

        Parameters
        ----------
        base_version
            The version the caller's work was based on; if another commit has
            landed since, :class:`~ticktensor.errors.VersionConflictError` is raised.
        replace
            Allow a segment, pack or table to supersede one with the same key
            (symbol, session; session) but other content, and a pack to take the place
            of its session's segments. Without it that is a conflict.
        remove_tables
            Keys ``(kind, symbol, session)`` of published tables the version drops, e.g.
            per-symbol tables whose rows a new all-symbol table of the session holds
            (:data:`ALL_SYMBOLS`). A key the latest version does not have is an error.

        Returns the new version, or the latest one unchanged when nothing differs
        (re-committing identical segments is a no-op).
        """
        segments, tables, packs = list(segments), list(tables), list(packs)
        with self._location.lock(LOCK_FILE):
            pointer = self._read_pointer()
            latest = int(pointer["version"])
            if base_version is not None and base_version != latest:
                raise VersionConflictError(
                    f"{self._location.display('')}: commit based on version {base_version} "
                    f"but the latest is {latest}; reopen and redo the change"
                )
            base = self._state_at(pointer)
            changes = base.changes(
                segments, tables, replace=replace, packs=packs, remove_tables=remove_tables
            )
            new_attrs = {**base.info.attributes, **(attributes or {})}
            new_stats = stats if stats is not None else base.info.stats
            if (
                changes.empty
                and new_stats == base.info.stats
                and new_attrs == dict(base.info.attributes)
            ):
                return StoreVersion.of_state(self._location, base)
            self._check_written([*changes.segments, *changes.packs, *changes.tables])
            self._check_packs_cover(changes.packs, changes.removed_segments)
            entry = LogEntry(
                version=latest + 1,
                parent=latest,
                parent_sha256=base.sha256,
                created=_now(),
                message=message,
                feature_names=changes.feature_names,
                label_names=changes.label_names,
                segments=tuple(sorted(changes.segments, key=lambda r: r.key)),
                tables=tuple(sorted(changes.tables, key=lambda r: r.key)),
                removed_segments=tuple(sorted(changes.removed_segments, key=lambda r: r.key)),
                removed_tables=tuple(sorted(changes.removed_tables, key=lambda r: r.key)),
                packs=tuple(sorted(changes.packs, key=lambda r: r.key)),
                removed_packs=tuple(sorted(changes.removed_packs, key=lambda r: r.key)),
                stats=new_stats,
                attributes=new_attrs,
            )
            rel = entry_path(entry.version)
            state = base.apply(entry, "", self._location.display(rel))
            if entry.version % self._checkpoint_every == 0:
                entry = self._write_checkpoint(entry, state)
            data = entry.to_json()
            # An unpublished file with this number is debris of an interrupted commit
            # (we hold the lock and the pointer is older): overwrite it.
            self._location.write_atomic(rel, data, durable=False)
            # One flush makes the new data files, the checkpoint and the log entry durable
            # (renames included) before the pointer names them; the pointer's own write
            # is durable.
            self._location.flush()
            digest = sha256_hex(data)
            self._location.write_atomic(POINTER_FILE, _pointer(entry.version, digest))
            state = state.vouched_by(digest)
            CACHE.put(self._location.url, state)
            self._latest_state = state
        return StoreVersion.of_state(self._location, state)

    def _write_checkpoint(self, entry: LogEntry, state: VersionState) -> LogEntry:
        """Write ``state`` as the checkpoint of ``entry``'s version; the entry that names it.

        Not flushed here: the commit's flush makes it durable with the log entry."""
        rel = checkpoint_path(entry.version)
        data = state.manifest.to_json()
        self._location.write_atomic(rel, data, durable=False)
        return dataclasses.replace(
            entry, checkpoint=CheckpointRef(rel, FileEntry(sha256_hex(data), len(data)))
        )

    def _check_packs_cover(
        self, packs: Sequence[PackRecord], removed: Sequence[RemovedRecord]
    ) -> None:
        """A pack that takes the place of its session's segments holds every symbol of
        them: a correction written by hand must not drop the others' rows silently."""
        for pack in packs:
            symbols = {r.key[0] for r in removed if r.key[1] == pack.session}
            if not symbols:
                continue
            missing = sorted(symbols - set(read_pack_index(self._location, pack).symbols))
            if missing:
                raise VersionConflictError(
                    f"the pack of session {pack.session} holds no rows of {missing[:5]}"
                    f"{' ...' if len(missing) > 5 else ''}, which the session's segments "
                    "hold: committing it would drop them; write the pack with every symbol"
                )

    def _check_written(self, records: Sequence[SegmentRecord | PackRecord | TableRecord]) -> None:
        for rec in records:
            files = (
                {rec.path: rec.file}
                if isinstance(rec, TableRecord)
                else {f"{rec.path}/{k}": v for k, v in rec.files.items()}
            )
            what = {SegmentRecord: "segment", PackRecord: "pack"}.get(type(rec), "table")
            for rel, entry in files.items():
                try:
                    size = self._location.size(rel)
                except FileNotFoundError:
                    raise StoreCorruptError(
                        f"{self._location.display(rel)}: file of a record being committed "
                        f"is missing; write the {what} again"
                    ) from None
                if size != entry.bytes:
                    raise StoreCorruptError(
                        f"{self._location.display(rel)}: {size} bytes on disk, the record "
                        f"says {entry.bytes}; write the {what} again"
                    )

    def verify(
        self,
        version: int | None = None,
        *,
        on_file: Callable[[str, int], None] | None = None,
    ) -> VerifyReport:
        """Re-hash every file of a version (default: latest) against its manifest, and
        check what readers check when they open it.

        The whole log up to the version is replayed, and every checkpoint on the way
        must agree with it; every record must pass the checks of a reader's open
        (symlinks, a pack's symbol list and shard indexes). Raises
        :class:`~ticktensor.errors.StoreCorruptError` naming each damaged or missing
        chunk and each disagreement; returns a report of what was checked when all is
        intact.
        """
        # Everything is read again (no cache), and the version file's own hash is
        # checked by verify_manifest, which reports it with every other problem.
        pinned = self._pin(version, check_hash=False, cache=StateCache())
        expected = self._expected_hash(pinned.version)
        try:
            log = checkpoint_problems(self._location, pinned.version)
        except StoreCorruptError as exc:
            log = [(entry_path(pinned.version), str(exc))]
        return verify_manifest(
            self._location,
            pinned.manifest,
            entry_path(pinned.version),
            expected,
            on_file,
            problems=log,
        )

    def repair(self, *, grace_s: float = 3600.0, dry_run: bool = False) -> RepairReport:
        """Remove files no published version refers to (debris of interrupted commits).

        Only files below ``segments/``, ``packs/``, ``events/``, ``versions/`` and
        ``staging/`` that no manifest from version 0 to the latest lists are candidates,
        and only those older than ``grace_s`` seconds are removed, so a job that is
        still writing keeps its files (pass 0 when no writer runs). Runs under the
        commit lock. Published data is never touched: every version stays readable and
        verifiable.
        """
        with self._location.lock(LOCK_FILE):
            manifests = self.versions()
            return repair_store(self._location, manifests, grace_s=grace_s, dry_run=dry_run)

    def _expected_hash(self, version: int) -> str:
        """The hash ``version``'s file must have: from the pointer down the children."""
        pointer = self._read_pointer()
        expected = str(pointer["sha256"])
        for v in range(int(pointer["version"]), version, -1):
            expected = parent_sha256(self._location, v)
        return expected


def _checkpoint_every(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: checkpoint_every must be a positive integer, got {value!r}")
    return value


def _versions_text() -> str:
    return " and ".join(str(v) for v in READABLE_FORMAT_VERSIONS)


def _layout(doc: object, where: str) -> Layout:
    try:
        if not isinstance(doc, dict):
            raise TypeError(f"expected an object, got {doc!r:.60}")
        return Layout.from_dict(doc)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # ConfigError is a ValueError
        raise StoreCorruptError(f"{where}: layout is malformed ({exc})") from None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _dumps(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"


def _pointer(version: int, sha256: str) -> bytes:
    return _dumps(
        {
            "format_version": FORMAT_VERSION,
            "version": version,
            "manifest": entry_path(version),
            "sha256": sha256,
        }
    )
