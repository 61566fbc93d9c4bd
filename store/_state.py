"""The records of one version keyed for O(1) lookups, advanced one log entry at a time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

from ticktensor.errors import SchemaError, StoreCorruptError, VersionConflictError

from ._log import LogEntry, RemovedRecord
from ._manifest import Manifest, PackRecord, SegmentRecord, TableRecord

__all__ = ["Changes", "VersionState"]

_R = TypeVar("_R", SegmentRecord, TableRecord, PackRecord)
_Record = SegmentRecord | TableRecord | PackRecord
#: The fields of a version besides its records.
_VERSION_FIELDS = (
    "version",
    "parent",
    "parent_sha256",
    "created",
    "message",
    "feature_names",
    "label_names",
    "stats",
    "attributes",
)


@dataclass(frozen=True)
class Changes:
    """What a commit adds to and removes from its base version's state."""

    segments: tuple[SegmentRecord, ...]
    tables: tuple[TableRecord, ...]
    removed_segments: tuple[RemovedRecord, ...]
    removed_tables: tuple[RemovedRecord, ...]
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]
    packs: tuple[PackRecord, ...] = ()
    removed_packs: tuple[RemovedRecord, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.segments
            or self.tables
            or self.packs
            or self.removed_segments
            or self.removed_tables
            or self.removed_packs
        )


@dataclass(frozen=True, eq=False)
class VersionState:
    """One version's records by key, with the hash of the version file that vouches for it.

    Never mutated: :meth:`apply` returns a new state. ``sha256`` is the hash of the
    version's file (a log entry, or a format-1 manifest); ``None`` only for the state
    before version 0.
    """

    version: int
    sha256: str | None
    info: Manifest  # the version's own fields; its record tuples are left empty
    segments: Mapping[tuple[str, str], SegmentRecord]
    tables: Mapping[tuple[str, str, str], TableRecord]
    packs: Mapping[tuple[str], PackRecord]

    @classmethod
    def before_first(cls) -> VersionState:
        """The state a version-0 log entry applies to: nothing."""
        info = Manifest(-1, None, None, "", "", (), ())
        return cls(-1, None, info, {}, {}, {})

    @classmethod
    def from_manifest(cls, manifest: Manifest, sha256: str, where: str) -> VersionState:
        """The state a full manifest (format 1, or a format-2 checkpoint) describes."""
        segments = {s.key: s for s in manifest.segments}
        tables = {t.key: t for t in manifest.tables}
        packs = {p.key: p for p in manifest.packs}
        if (
            len(segments) != len(manifest.segments)
            or len(tables) != len(manifest.tables)
            or len(packs) != len(manifest.packs)
        ):
            raise StoreCorruptError(f"{where}: a (symbol, session) key appears twice")
        info = manifest.evolve(segments=(), tables=(), packs=())
        state = cls(manifest.version, sha256, info, segments, tables, packs)
        state.__dict__["manifest"] = manifest  # already built: keep it
        return state

    def vouched_by(self, sha256: str) -> VersionState:
        """This state, as published by the version file with hash ``sha256``."""
        state = VersionState(
            self.version, sha256, self.info, self.segments, self.tables, self.packs
        )
        if "manifest" in self.__dict__:
            state.__dict__["manifest"] = self.__dict__["manifest"]
        return state

    @cached_property
    def manifest(self) -> Manifest:
        """The full :class:`Manifest` (records sorted by key); built once, on demand."""
        return self.info.evolve(
            segments=tuple(self.segments[k] for k in sorted(self.segments)),
            tables=tuple(self.tables[k] for k in sorted(self.tables)),
            packs=tuple(self.packs[k] for k in sorted(self.packs)),
        )

    def apply(self, entry: LogEntry, sha256: str, where: str) -> VersionState:
        """The state after ``entry``; a log that does not fit this state is corrupt."""
        if entry.version != self.version + 1 or entry.parent_sha256 != self.sha256:
            raise StoreCorruptError(
                f"{where}: log entry of version {entry.version} does not follow version "
                f"{self.version} (parent {entry.parent}, parent sha256 "
                f"{(entry.parent_sha256 or 'null')[:16]})"
            )
        segments = _applied(self.segments, entry.removed_segments, entry.segments, where)
        tables = _applied(self.tables, entry.removed_tables, entry.tables, where)
        packs = _applied(self.packs, entry.removed_packs, entry.packs, where)
        info = Manifest(
            version=entry.version,
            parent=entry.parent,
            parent_sha256=entry.parent_sha256,
            created=entry.created,
            message=entry.message,
            feature_names=entry.feature_names,
            label_names=entry.label_names,
            stats=entry.stats,
            attributes=entry.attributes,
        )
        return VersionState(entry.version, sha256, info, segments, tables, packs)

    def differences(self, other: VersionState, ours: str, theirs: str) -> list[str]:
        """How ``other`` (the same version as read from elsewhere) differs from this
        state, each difference a sentence naming the two sides ``ours`` and ``theirs``
        (e.g. "the log", "the checkpoint"); empty when both describe one version."""
        out = []
        for name in _VERSION_FIELDS:
            mine, their = getattr(self.info, name), getattr(other.info, name)
            if mine != their:
                out.append(f"{name} is {mine!r:.80} in {ours}, {their!r:.80} in {theirs}")
        kinds: tuple[tuple[str, Mapping[Any, _Record], Mapping[Any, _Record]], ...] = (
            ("segment", self.segments, other.segments),
            ("table", self.tables, other.tables),
            ("pack", self.packs, other.packs),
        )
        for kind, records, others in kinds:
            for key in sorted(records.keys() | others.keys()):
                here, there = records.get(key), others.get(key)
                if here == there:
                    continue
                at = f"at {here.path}" if here is not None else "absent"
                other_at = f"at {there.path}" if there is not None else "absent"
                out.append(f"{kind} {'/'.join(key)} is {at} in {ours}, {other_at} in {theirs}")
        return out

    def changes(
        self,
        segments: Sequence[SegmentRecord],
        tables: Sequence[TableRecord],
        *,
        replace: bool,
        packs: Sequence[PackRecord] = (),
        remove_tables: Iterable[tuple[str, str, str]] = (),
    ) -> Changes:
        """What committing ``segments``, ``packs`` and ``tables`` on this state changes.

        O(their number), plus one pass over the segments when packs are added. A record
        equal in path to the published one with its key is a no-op; one with other
        content conflicts (:class:`VersionConflictError`) unless ``replace``. A session
        is held either by one pack or by segments: a pack added for a session that has
        segments removes them under ``replace`` (that is how ``migrate`` packs a
        session) and conflicts otherwise; a segment for a packed session conflicts (a
        correction rewrites the session's pack). Every segment and pack of the result
        must share feature and label names (:class:`SchemaError`). ``remove_tables``
        are keys of published tables to drop (one not published is a
        :class:`VersionConflictError`; one also added is replaced as usual).
        """
        add_segs, rm_segs = _changed(self.segments, segments, replace, self.version)
        add_tabs, rm_tabs = _changed(self.tables, tables, replace, self.version)
        rm_tabs = rm_tabs + self._dropped_tables(remove_tables, add_tabs)
        add_packs, rm_packs = _changed(self.packs, packs, replace, self.version)
        rm_segs = rm_segs + self._segments_under(add_packs, add_segs, replace)
        feature_names, label_names = self.info.feature_names, self.info.label_names
        added: list[SegmentRecord | PackRecord] = [*add_segs, *add_packs]
        if added:
            kept = len(self.segments) - len(rm_segs) + len(self.packs) - len(rm_packs)
            names = (
                (added[0].feature_names, added[0].label_names)
                if not kept
                else (self.info.feature_names, self.info.label_names)
            )
            for rec in added:
                if (rec.feature_names, rec.label_names) != names:
                    what = (
                        f"segment {rec.symbol}/{rec.session}"
                        if isinstance(rec, SegmentRecord)
                        else f"pack {rec.session}"
                    )
                    raise SchemaError(
                        f"{what} has features {list(rec.feature_names)} and labels "
                        f"{list(rec.label_names)}; the version has features "
                        f"{list(names[0])} and labels {list(names[1])}"
                    )
            feature_names, label_names = names
        return Changes(
            add_segs,
            add_tabs,
            rm_segs,
            rm_tabs,
            tuple(feature_names),
            tuple(label_names),
            add_packs,
            rm_packs,
        )

    def _dropped_tables(
        self, keys: Iterable[tuple[str, str, str]], added: Sequence[TableRecord]
    ) -> tuple[RemovedRecord, ...]:
        replaced = {t.key for t in added}
        out = []
        for key in dict.fromkeys(keys):
            old = self.tables.get(key)
            if old is None:
                raise VersionConflictError(
                    f"{'/'.join(key)}: no such table in version {self.version} to remove"
                )
            if key not in replaced:  # a replaced key is removed by its replacement
                out.append(RemovedRecord(old.key, old.path))
        return tuple(out)

    def _segments_under(
        self,
        packs: Sequence[PackRecord],
        segments: Sequence[SegmentRecord],
        replace: bool,
    ) -> tuple[RemovedRecord, ...]:
        """The published segments that ``packs`` take the place of; a segment added for
        a session a pack holds is a conflict."""
        packed = {p.session for p in self.packs.values()} | {p.session for p in packs}
        for seg in segments:
            if seg.session in packed:
                raise VersionConflictError(
                    f"{seg.symbol}/{seg.session}: session {seg.session} is stored as a pack; "
                    "a correction writes the session's pack again (Store.write_pack)"
                )
        if not packs or not self.segments:
            return ()
        sessions = {p.session for p in packs}
        under = [rec for key, rec in self.segments.items() if key[1] in sessions]
        if under and not replace:
            first = under[0]
            raise VersionConflictError(
                f"session {first.session} has {len(under)} segment(s) in version "
                f"{self.version} (e.g. {first.symbol}); pass replace=True to store it as a "
                "pack instead (ticktensor migrate)"
            )
        return tuple(RemovedRecord(rec.key, rec.path) for rec in under)


def _changed(
    published: Mapping[Any, _R], added: Sequence[_R], replace: bool, latest: int
) -> tuple[tuple[_R, ...], tuple[RemovedRecord, ...]]:
    wanted: dict[Any, _R] = {}
    for rec in added:
        old = wanted.get(rec.key, published.get(rec.key))
        if old is not None and old.path == rec.path:
            continue
        if old is not None and not replace:
            raise VersionConflictError(
                f"{'/'.join(rec.key)} already exists in version {latest} with other content "
                f"({old.path} vs {rec.path}); pass replace=True to supersede it"
            )
        wanted[rec.key] = rec
    adds = tuple(
        rec
        for key, rec in wanted.items()
        if key not in published or published[key].path != rec.path
    )
    removed = tuple(RemovedRecord(r.key, published[r.key].path) for r in adds if r.key in published)
    return adds, removed


def _applied(
    base: Mapping[Any, _R], removed: Sequence[RemovedRecord], added: Sequence[_R], where: str
) -> dict[Any, _R]:
    out = dict(base)
    for rm in removed:
        old = out.pop(rm.key, None)
        if old is None or old.path != rm.path:
            raise StoreCorruptError(
                f"{where}: removes {'/'.join(rm.key)} at {rm.path}, which the parent version "
                f"{'does not have' if old is None else f'has at {old.path}'}"
            )
    for rec in added:
        if rec.key in out:
            raise StoreCorruptError(
                f"{where}: adds {'/'.join(rec.key)} at {rec.path}, which the parent version "
                f"already has at {out[rec.key].path} without removing it"
            )
        out[rec.key] = rec
    return out
