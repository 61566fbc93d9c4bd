"""The store: create, open, write segments and tables, commit versions atomically."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.errors import (
    FormatVersionError,
    SchemaError,
    StoreCorruptError,
    StoreError,
    StoreNotFoundError,
    VersionConflictError,
    VersionNotFoundError,
)

from ._layout import Layout
from ._location import Location
from ._manifest import (
    FORMAT_VERSION,
    FeatureStats,
    Manifest,
    SegmentRecord,
    SourceFile,
    TableRecord,
    load_json,
    sha256_hex,
)
from ._repair import RepairReport
from ._repair import repair as repair_store
from ._segments import segment_content_hash, segment_path, write_segment
from ._tables import encode_table, table_path, write_table
from ._verify import VerifyReport, verify_manifest
from ._version import StoreVersion

__all__ = ["Store"]

STORE_FILE = "ticktensor.json"
POINTER_FILE = "latest.json"
LOCK_FILE = ".lock"


def manifest_path(version: int) -> str:
    return f"versions/{version:08d}.json"


class Store:
    """A versioned ticktensor store on a local directory or any fsspec URL.

    Writers add immutable segments and tables, then :meth:`commit` publishes a new
    version: the manifest is written first, the ``latest.json`` pointer is replaced
    last and atomically. Readers pin a version with :meth:`version`.

    Examples
    --------
    >>> import numpy as np
    >>> from ticktensor.store import Store
    >>> store = Store.create("memory://doc-example", exist_ok=True)
    >>> seg = store.write_segment(
    ...     symbol="AAPL", session="2024-01-02",
    ...     ts=np.arange(4, dtype=np.int64), values=np.ones((4, 2), np.float32),
    ...     feature_names=["ret", "spread"])
    >>> store.commit(segments=[seg], message="first day").version
    1
    """

    def __init__(self, location: Location, layout: Layout) -> None:
        self._location = location
        self._layout = layout

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        url: str,
        *,
        layout: Layout | None = None,
        storage_options: Mapping[str, Any] | None = None,
        exist_ok: bool = False,
    ) -> Store:
        """Create an empty store (version 0) at ``url``; ``layout`` is its default layout."""
        location = Location(str(url), dict(storage_options or {}))
        if location.exists(STORE_FILE):
            if not exist_ok:
                raise StoreError(f"{location.display('')}: a store already exists here")
            store = cls.open(url, storage_options=storage_options)
            if location.exists(POINTER_FILE):
                return store
        layout = layout or Layout()
        with location.lock(LOCK_FILE):
            empty = Manifest(
                version=0,
                parent=None,
                parent_sha256=None,
                created=_now(),
                message="create store",
                feature_names=(),
                label_names=(),
            )
            data = empty.to_json()
            location.write_atomic(manifest_path(0), data)
            header = {
                "format": "ticktensor.store",
                "format_version": FORMAT_VERSION,
                "created": empty.created,
                "layout": layout.to_dict(),
            }
            location.write_atomic(STORE_FILE, _dumps(header))
            location.write_atomic(POINTER_FILE, _pointer(0, sha256_hex(data)))
        return cls(location, layout)

    @classmethod
    def open(cls, url: str, *, storage_options: Mapping[str, Any] | None = None) -> Store:
        """Open an existing store for reading and writing."""
        location = Location(str(url), dict(storage_options or {}))
        where = location.display(STORE_FILE)
        try:
            data = location.read_bytes(STORE_FILE)
        except FileNotFoundError:
            raise StoreNotFoundError(
                f"{location.display('')}: no ticktensor store here (missing {STORE_FILE}); "
                "create one with Store.create or `ticktensor demo --out`"
            ) from None
        header = load_json(data, where, "store header")
        if not isinstance(header, dict) or header.get("format") != "ticktensor.store":
            raise StoreCorruptError(f"{where}: not a ticktensor store")
        if header.get("format_version") != FORMAT_VERSION:
            raise FormatVersionError(
                f"{where}: store format version "
                f"{header.get('format_version')!r}; this ticktensor reads {FORMAT_VERSION}"
            )
        return cls(location, _layout(header.get("layout"), where))

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

    # -- reading -----------------------------------------------------------------------

    def latest_version(self) -> int:
        """The number of the latest published version (0 for an empty store)."""
        return int(self._read_pointer()["version"])

    def version(self, version: int | None = None) -> StoreVersion:
        """A read-only view pinned to ``version`` (default: the latest).

        The latest version's manifest must match the hash in ``latest.json``.
        """
        return self._pin(version, check_hash=True)

    def _pin(self, version: int | None, *, check_hash: bool) -> StoreVersion:
        pointer = self._read_pointer()
        latest = int(pointer["version"])
        if version is None:
            version = latest
        if not 0 <= version <= latest:
            raise VersionNotFoundError(
                f"{self._location.display('')}: version {version} does not exist "
                f"(versions 0..{latest})"
            )
        manifest = self._read_manifest(version)
        if check_hash and version == latest:  # the pointer's hash vouches for the manifest
            rel = manifest_path(version)
            digest = sha256_hex(self._location.read_bytes(rel))
            if digest != pointer["sha256"]:
                raise StoreCorruptError(
                    f"{self._location.display(rel)}: manifest sha256 {digest[:16]} != recorded "
                    f"{pointer['sha256'][:16]} in {POINTER_FILE}"
                )
        return StoreVersion(self._location, manifest)

    def versions(self) -> list[Manifest]:
        """Every published version's manifest, oldest first."""
        return [self._read_manifest(v) for v in range(self.latest_version() + 1)]

    def _read_pointer(self) -> dict[str, Any]:
        where = self._location.display(POINTER_FILE)
        try:
            data = self._location.read_bytes(POINTER_FILE)
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
        if pointer.get("format_version") not in (None, FORMAT_VERSION):
            raise FormatVersionError(
                f"{where}: pointer format version {pointer.get('format_version')!r}; "
                f"this ticktensor reads {FORMAT_VERSION}"
            )
        return dict(pointer)

    def _read_manifest(self, version: int) -> Manifest:
        rel = manifest_path(version)
        try:
            data = self._location.read_bytes(rel)
        except FileNotFoundError:
            raise StoreCorruptError(
                f"{self._location.display(rel)}: manifest of version {version} is missing"
            ) from None
        return Manifest.from_json(data, self._location.display(rel))

    # -- writing -----------------------------------------------------------------------

    def write_segment(
        self,
        *,
        symbol: str,
        session: str,
        ts: npt.NDArray[np.int64],
        values: npt.NDArray[np.float32],
        feature_names: Sequence[str],
        labels: npt.NDArray[np.float32] | None = None,
        label_names: Sequence[str] = (),
        layout: Layout | None = None,
        sources: Sequence[SourceFile] = (),
    ) -> SegmentRecord:
        """Write one (symbol, session) segment; it becomes visible at the next :meth:`commit`.

        Writing content identical to a segment of the latest version writes nothing
        and returns the published record, so reruns are idempotent.
        """
        layout = layout or self._layout
        content_hash = segment_content_hash(
            symbol, session, ts, values, labels, feature_names, label_names, layout
        )
        path = segment_path(symbol, session, content_hash)
        for seg in self.version().segments:
            if seg.path == path and seg.content_hash == content_hash:
                return seg
        return write_segment(
            self._location,
            symbol=symbol,
            session=session,
            ts=ts,
            values=values,
            labels=labels,
            feature_names=feature_names,
            label_names=label_names,
            layout=layout,
            sources=sources,
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

        A table identical to one of the latest version is not written again.
        """
        data = encode_table(table)
        path = table_path(kind, symbol, session, data)
        for rec in self.version().tables:
            if rec.path == path:
                return rec
        return write_table(
            self._location,
            kind=kind,
            symbol=symbol,
            session=session,
            table=table,
            data=data,
            sources=sources,
        )

    def commit(
        self,
        *,
        segments: Iterable[SegmentRecord] = (),
        tables: Iterable[TableRecord] = (),
        stats: FeatureStats | None = None,
        attributes: Mapping[str, Any] | None = None,
        message: str = "",
        base_version: int | None = None,
        replace: bool = False,
    ) -> StoreVersion:
        """Publish a new version: the latest one plus ``segments`` and ``tables``.

        Parameters
        ----------
        base_version
            The version the caller's work was based on; if another commit has
            landed since, :class:`~ticktensor.errors.VersionConflictError` is raised.
        replace
            Allow a segment or table to supersede one with the same key
            (symbol, session) but other content. Without it that is a conflict.

        Returns the new version, or the latest one unchanged when nothing differs
        (re-committing identical segments is a no-op).
        """
        segments, tables = list(segments), list(tables)
        with self._location.lock(LOCK_FILE):
            pointer = self._read_pointer()
            latest = int(pointer["version"])
            if base_version is not None and base_version != latest:
                raise VersionConflictError(
                    f"{self._location.display('')}: commit based on version {base_version} "
                    f"but the latest is {latest}; reopen and redo the change"
                )
            base = self._read_manifest(latest)
            if sha256_hex(self._location.read_bytes(manifest_path(latest))) != pointer["sha256"]:
                raise StoreCorruptError(
                    f"{self._location.display(manifest_path(latest))}: manifest hash does "
                    "not match the version pointer"
                )
            merged_segments, seg_changed = _merge(base.segments, segments, replace, latest)
            merged_tables, tab_changed = _merge(base.tables, tables, replace, latest)
            feature_names, label_names = _names(merged_segments, base)
            new_attrs = {**base.attributes, **(attributes or {})}
            new_stats = stats if stats is not None else base.stats
            if (
                not (seg_changed or tab_changed)
                and new_stats == base.stats
                and (new_attrs == dict(base.attributes))
            ):
                return StoreVersion(self._location, base)
            self._check_written([*segments, *tables])
            self._location.flush()  # the new data files reach the disk before the manifest
            manifest = Manifest(
                version=latest + 1,
                parent=latest,
                parent_sha256=pointer["sha256"],
                created=_now(),
                message=message,
                feature_names=feature_names,
                label_names=label_names,
                segments=tuple(sorted(merged_segments, key=lambda s: s.key)),
                tables=tuple(sorted(merged_tables, key=lambda t: t.key)),
                stats=new_stats,
                attributes=new_attrs,
            )
            data = manifest.to_json()
            # An unpublished manifest with this number is debris of an interrupted
            # commit (we hold the lock and the pointer is older): overwrite it.
            self._location.write_atomic(manifest_path(manifest.version), data)
            self._location.write_atomic(POINTER_FILE, _pointer(manifest.version, sha256_hex(data)))
        return StoreVersion(self._location, manifest)

    def _check_written(self, records: Sequence[SegmentRecord | TableRecord]) -> None:
        for rec in records:
            files = (
                {f"{rec.path}/{k}": v for k, v in rec.files.items()}
                if isinstance(rec, SegmentRecord)
                else {rec.path: rec.file}
            )
            for rel, entry in files.items():
                try:
                    size = self._location.size(rel)
                except FileNotFoundError:
                    raise StoreCorruptError(
                        f"{self._location.display(rel)}: file of a record being committed "
                        "is missing; write the segment again"
                    ) from None
                if size != entry.bytes:
                    raise StoreCorruptError(
                        f"{self._location.display(rel)}: {size} bytes on disk, the record "
                        f"says {entry.bytes}; write the segment again"
                    )

    def verify(
        self,
        version: int | None = None,
        *,
        on_file: Callable[[str, int], None] | None = None,
    ) -> VerifyReport:
        """Re-hash every file of a version (default: latest) against its manifest.

        Raises :class:`~ticktensor.errors.StoreCorruptError` naming each damaged or
        missing chunk; returns a report of what was checked when all is intact.
        """
        pinned = self._pin(version, check_hash=False)  # verify reports every problem
        expected = self._expected_manifest_hash(pinned.version)
        return verify_manifest(
            self._location, pinned.manifest, manifest_path(pinned.version), expected, on_file
        )

    def repair(self, *, grace_s: float = 3600.0, dry_run: bool = False) -> RepairReport:
        """Remove files no published version refers to (debris of interrupted commits).

        Only files below ``segments/``, ``events/``, ``versions/`` and ``staging/`` that
        no manifest from version 0 to the latest lists are candidates, and only those
        older than ``grace_s`` seconds are removed, so a job that is still writing keeps
        its files (pass 0 when no writer runs). Runs under the commit lock. Published
        data is never touched: every version stays readable and verifiable.
        """
        with self._location.lock(LOCK_FILE):
            manifests = self.versions()
            return repair_store(self._location, manifests, grace_s=grace_s, dry_run=dry_run)

    def _expected_manifest_hash(self, version: int) -> str:
        pointer = self._read_pointer()
        expected = str(pointer["sha256"])
        for v in range(int(pointer["version"]), version, -1):
            child = self._read_manifest(v)
            if child.parent_sha256 is None:
                raise StoreCorruptError(f"version {v} does not record its parent's hash")
            expected = child.parent_sha256
        return expected


_R = TypeVar("_R", SegmentRecord, TableRecord)


def _merge(
    published: Sequence[_R], added: Sequence[_R], replace: bool, latest: int
) -> tuple[list[_R], bool]:
    by_key: dict[Any, _R] = {r.key: r for r in published}
    changed = False
    for rec in added:
        old = by_key.get(rec.key)
        if old is not None and old.path == rec.path:
            continue
        if old is not None and not replace:
            raise VersionConflictError(
                f"{'/'.join(rec.key)} already exists in version {latest} with other content "
                f"({old.path} vs {rec.path}); pass replace=True to supersede it"
            )
        by_key[rec.key] = rec
        changed = True
    return list(by_key.values()), changed


def _names(
    segments: Sequence[SegmentRecord], base: Manifest
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not segments:
        return base.feature_names, base.label_names
    first = segments[0]
    for seg in segments:
        if seg.feature_names != first.feature_names or seg.label_names != first.label_names:
            raise SchemaError(
                f"segment {seg.symbol}/{seg.session} has features {list(seg.feature_names)} "
                f"and labels {list(seg.label_names)}; the version has features "
                f"{list(first.feature_names)} and labels {list(first.label_names)}"
            )
    return first.feature_names, first.label_names


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
            "manifest": manifest_path(version),
            "sha256": sha256,
        }
    )
