"""Log entries: one small, hashed file per version, listing what it changes from its parent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ticktensor.errors import FormatVersionError, StoreCorruptError

from ._location import check_relative
from ._manifest import (
    FORMAT_VERSION,
    FeatureStats,
    FileEntry,
    PackRecord,
    SegmentRecord,
    TableRecord,
    _dict,
    _entry,
    _hex,
    _int,
    _list,
    _names,
    _pack_from_dict,
    _segment_from_dict,
    _stats_from_dict,
    _str,
    _table_from_dict,
    canonical_json,
    check_record_paths,
    load_json,
    version_fields,
)

__all__ = ["LOG_FORMAT", "CheckpointRef", "LogEntry", "RemovedRecord"]

LOG_FORMAT = "ticktensor.log"


@dataclass(frozen=True)
class CheckpointRef:
    """Where the full state of an entry's version is written, and its hash."""

    path: str
    file: FileEntry


@dataclass(frozen=True)
class RemovedRecord:
    """A record the entry takes out of its parent's state: its key and its path."""

    key: tuple[str, ...]
    path: str


@dataclass(frozen=True)
class LogEntry:
    """One store version as a change to its parent (store format 2).

    ``segments``, ``packs`` and ``tables`` are the records the version adds;
    ``removed_segments``, ``removed_packs`` and ``removed_tables`` the parent's records
    it drops (a record superseded by
    ``replace=True`` is removed, then its successor added). Names, statistics and
    attributes are the version's own, in full: they are small. ``checkpoint`` is set on
    versions whose full state is also written as a checkpoint file.
    """

    version: int
    parent: int | None
    parent_sha256: str | None
    created: str
    message: str
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]
    segments: tuple[SegmentRecord, ...] = ()
    tables: tuple[TableRecord, ...] = ()
    removed_segments: tuple[RemovedRecord, ...] = ()
    removed_tables: tuple[RemovedRecord, ...] = ()
    stats: FeatureStats | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: CheckpointRef | None = None
    packs: tuple[PackRecord, ...] = ()
    removed_packs: tuple[RemovedRecord, ...] = ()

    def to_json(self) -> bytes:
        """Canonical JSON (sorted keys, no NaN), so equal entries are equal bytes."""
        doc = {
            "format": LOG_FORMAT,
            "format_version": FORMAT_VERSION,
            **version_fields(self),
            "removed_segments": [
                _removed_to_dict(r, ("symbol", "session")) for r in self.removed_segments
            ],
            "removed_tables": [
                _removed_to_dict(r, ("kind", "symbol", "session")) for r in self.removed_tables
            ],
            "removed_packs": [_removed_to_dict(r, ("session",)) for r in self.removed_packs],
            "checkpoint": None
            if self.checkpoint is None
            else {
                "path": self.checkpoint.path,
                "file": [self.checkpoint.file.sha256, self.checkpoint.file.bytes],
            },
        }
        return canonical_json(doc)

    @classmethod
    def from_json(cls, data: bytes, where: str) -> LogEntry:
        """Parse and check an entry; anything malformed raises ``StoreCorruptError``.

        Like manifests, entries are untrusted: every field is type-checked and every
        path must stay inside the store (records below ``segments/`` and ``events/``,
        the checkpoint below ``versions/``).
        """
        return cls.from_doc(load_json(data, where, "log entry"), where)

    @classmethod
    def from_doc(cls, doc: object, where: str) -> LogEntry:
        """:meth:`from_json` of an already decoded JSON document."""
        if not isinstance(doc, dict) or doc.get("format") != LOG_FORMAT:
            raise StoreCorruptError(f"{where}: not a ticktensor log entry")
        if doc.get("format_version") != FORMAT_VERSION:
            raise FormatVersionError(
                f"{where}: log entry format version {doc.get('format_version')!r}; "
                f"this ticktensor reads {FORMAT_VERSION}"
            )
        try:
            entry = _entry_from_dict(doc)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
            raise StoreCorruptError(
                f"{where}: log entry field missing or malformed: {type(exc).__name__} {exc}"
            ) from None
        check_record_paths(entry.segments, entry.tables, where, entry.packs)
        if entry.checkpoint is not None:
            check_relative(entry.checkpoint.path, f"{where}: checkpoint", prefix="versions/")
        return entry


def _entry_from_dict(doc: dict[str, Any]) -> LogEntry:
    features = _names(doc["feature_names"])
    labels = _names(doc["label_names"])
    parent = doc["parent"]
    checkpoint = doc["checkpoint"]
    version = _int(doc["version"])
    if parent is not None and _int(parent) != version - 1:
        raise ValueError(f"version {version} names parent {parent}; a log entry's is {version - 1}")
    if (parent is None) != (doc["parent_sha256"] is None):
        raise ValueError("parent and parent_sha256 must both be set or both be null")
    return LogEntry(
        version=version,
        parent=None if parent is None else _int(parent),
        parent_sha256=None if doc["parent_sha256"] is None else _hex(doc["parent_sha256"]),
        created=_str(doc["created"]),
        message=_str(doc["message"]),
        feature_names=features,
        label_names=labels,
        stats=None if doc["stats"] is None else _stats_from_dict(doc["stats"]),
        attributes=_dict(doc["attributes"]),
        segments=tuple(_segment_from_dict(s, features, labels) for s in _list(doc["segments"])),
        tables=tuple(_table_from_dict(t) for t in _list(doc["tables"])),
        removed_segments=tuple(
            _removed_from_dict(r, ("symbol", "session")) for r in _list(doc["removed_segments"])
        ),
        removed_tables=tuple(
            _removed_from_dict(r, ("kind", "symbol", "session"))
            for r in _list(doc["removed_tables"])
        ),
        checkpoint=None
        if checkpoint is None
        else CheckpointRef(_str(_dict(checkpoint)["path"]), _entry(checkpoint["file"])),
        # Entries written before packs existed have neither list.
        packs=tuple(_pack_from_dict(p, features, labels) for p in _list(doc.get("packs", []))),
        removed_packs=tuple(
            _removed_from_dict(r, ("session",)) for r in _list(doc.get("removed_packs", []))
        ),
    )


def _removed_to_dict(rec: RemovedRecord, fields: tuple[str, ...]) -> dict[str, str]:
    return {**dict(zip(fields, rec.key, strict=True)), "path": rec.path}


def _removed_from_dict(value: object, fields: tuple[str, ...]) -> RemovedRecord:
    d = _dict(value)
    return RemovedRecord(tuple(_str(d[f]) for f in fields), _str(d["path"]))
