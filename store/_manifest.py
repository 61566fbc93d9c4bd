"""Version manifests: the immutable, hashed description of one store version."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ticktensor.errors import FormatVersionError, StoreCorruptError

__all__ = [
    "FORMAT_VERSION",
    "FeatureStats",
    "FileEntry",
    "Manifest",
    "SegmentRecord",
    "SourceFile",
    "TableRecord",
    "sha256_hex",
]

FORMAT_VERSION = 1


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileEntry:
    """One stored file: its content hash and size."""

    sha256: str
    bytes: int


@dataclass(frozen=True)
class SourceFile:
    """Provenance: an input file a segment or table was made from."""

    path: str
    sha256: str
    bytes: int


@dataclass(frozen=True)
class FeatureStats:
    """Per-feature mean and standard deviation over a declared training period.

    ``period`` is ``[start, end)`` in ns UTC; ``count`` is the number of rows used.
    """

    names: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    count: int
    period: tuple[int, int]

    def __post_init__(self) -> None:
        if not len(self.names) == len(self.mean) == len(self.std):
            raise ValueError(
                f"stats need one mean and std per feature: {len(self.names)} names, "
                f"{len(self.mean)} means, {len(self.std)} stds"
            )


@dataclass(frozen=True)
class SegmentRecord:
    """One immutable feature segment: a contiguous series of one symbol in one session.

    ``path`` is the Zarr group, relative to the store root; ``files`` maps every
    file below it (``values/c/3/0``, ``zarr.json`` ...) to its hash and size.
    """

    symbol: str
    session: str
    path: str
    rows: int
    ts_start: int
    ts_end: int
    layout: Mapping[str, Any]
    content_hash: str
    files: Mapping[str, FileEntry]
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...] = ()
    sources: tuple[SourceFile, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.symbol, self.session)

    @property
    def nbytes(self) -> int:
        return sum(f.bytes for f in self.files.values())


@dataclass(frozen=True)
class TableRecord:
    """One immutable Parquet table of events (``kind`` is an event schema or ``quarantine``)."""

    kind: str
    symbol: str
    session: str
    path: str
    rows: int
    ts_start: int | None
    ts_end: int | None
    file: FileEntry
    sources: tuple[SourceFile, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.symbol, self.session)

    @property
    def nbytes(self) -> int:
        return self.file.bytes


@dataclass(frozen=True)
class Manifest:
    """Everything one store version contains. Serialized as canonical JSON."""

    version: int
    parent: int | None
    parent_sha256: str | None
    created: str
    message: str
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]
    segments: tuple[SegmentRecord, ...] = ()
    tables: tuple[TableRecord, ...] = ()
    stats: FeatureStats | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(sorted({s.symbol for s in self.segments} | {t.symbol for t in self.tables}))

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.segments) + sum(t.nbytes for t in self.tables)

    def evolve(self, **changes: Any) -> Manifest:
        return replace(self, **changes)

    def to_json(self) -> bytes:
        doc = {
            "format": "ticktensor.manifest",
            "format_version": FORMAT_VERSION,
            "version": self.version,
            "parent": self.parent,
            "parent_sha256": self.parent_sha256,
            "created": self.created,
            "message": self.message,
            "feature_names": list(self.feature_names),
            "label_names": list(self.label_names),
            "stats": None if self.stats is None else _stats_to_dict(self.stats),
            "attributes": dict(self.attributes),
            "segments": [_segment_to_dict(s, self) for s in self.segments],
            "tables": [_table_to_dict(t) for t in self.tables],
        }
        return json.dumps(doc, indent=1, sort_keys=True, allow_nan=False).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Manifest:
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StoreCorruptError(f"{where}: manifest is not valid JSON ({exc})") from exc
        if not isinstance(doc, dict) or doc.get("format") != "ticktensor.manifest":
            raise StoreCorruptError(f"{where}: not a ticktensor manifest")
        fv = doc.get("format_version")
        if fv != FORMAT_VERSION:
            raise FormatVersionError(
                f"{where}: manifest format version {fv!r}; this ticktensor reads {FORMAT_VERSION}"
            )
        try:
            return cls(
                version=int(doc["version"]),
                parent=doc["parent"],
                parent_sha256=doc["parent_sha256"],
                created=doc["created"],
                message=doc["message"],
                feature_names=tuple(doc["feature_names"]),
                label_names=tuple(doc["label_names"]),
                stats=None if doc["stats"] is None else _stats_from_dict(doc["stats"]),
                attributes=doc["attributes"],
                segments=tuple(
                    _segment_from_dict(s, tuple(doc["feature_names"]), tuple(doc["label_names"]))
                    for s in doc["segments"]
                ),
                tables=tuple(_table_from_dict(t) for t in doc["tables"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreCorruptError(f"{where}: manifest field missing or malformed: {exc}") from exc


def _files_to_dict(files: Mapping[str, FileEntry]) -> dict[str, list[Any]]:
    return {k: [v.sha256, v.bytes] for k, v in sorted(files.items())}


def _sources_to_list(sources: tuple[SourceFile, ...]) -> list[dict[str, Any]]:
    return [{"path": s.path, "sha256": s.sha256, "bytes": s.bytes} for s in sources]


def _sources_from_list(items: list[dict[str, Any]]) -> tuple[SourceFile, ...]:
    return tuple(SourceFile(str(s["path"]), str(s["sha256"]), int(s["bytes"])) for s in items)


def _segment_to_dict(s: SegmentRecord, m: Manifest) -> dict[str, Any]:
    # Every segment of a version shares the manifest's feature and label names
    # (commit enforces it), so they are stored once, at the top.
    if s.feature_names != m.feature_names or s.label_names != m.label_names:
        raise ValueError(f"segment {s.symbol}/{s.session} has other feature names than its version")
    return {
        "symbol": s.symbol,
        "session": s.session,
        "path": s.path,
        "rows": s.rows,
        "ts_start": s.ts_start,
        "ts_end": s.ts_end,
        "layout": dict(s.layout),
        "content_hash": s.content_hash,
        "files": _files_to_dict(s.files),
        "sources": _sources_to_list(s.sources),
    }


def _segment_from_dict(
    d: dict[str, Any], feature_names: tuple[str, ...], label_names: tuple[str, ...]
) -> SegmentRecord:
    return SegmentRecord(
        feature_names=feature_names,
        label_names=label_names,
        symbol=str(d["symbol"]),
        session=str(d["session"]),
        path=str(d["path"]),
        rows=int(d["rows"]),
        ts_start=int(d["ts_start"]),
        ts_end=int(d["ts_end"]),
        layout=dict(d["layout"]),
        content_hash=str(d["content_hash"]),
        files={k: FileEntry(str(v[0]), int(v[1])) for k, v in d["files"].items()},
        sources=_sources_from_list(d["sources"]),
    )


def _table_to_dict(t: TableRecord) -> dict[str, Any]:
    return {
        "kind": t.kind,
        "symbol": t.symbol,
        "session": t.session,
        "path": t.path,
        "rows": t.rows,
        "ts_start": t.ts_start,
        "ts_end": t.ts_end,
        "file": [t.file.sha256, t.file.bytes],
        "sources": _sources_to_list(t.sources),
    }


def _table_from_dict(d: dict[str, Any]) -> TableRecord:
    return TableRecord(
        kind=str(d["kind"]),
        symbol=str(d["symbol"]),
        session=str(d["session"]),
        path=str(d["path"]),
        rows=int(d["rows"]),
        ts_start=None if d["ts_start"] is None else int(d["ts_start"]),
        ts_end=None if d["ts_end"] is None else int(d["ts_end"]),
        file=FileEntry(str(d["file"][0]), int(d["file"][1])),
        sources=_sources_from_list(d["sources"]),
    )


def _stats_to_dict(s: FeatureStats) -> dict[str, Any]:
    return {
        "names": list(s.names),
        "mean": list(s.mean),
        "std": list(s.std),
        "count": s.count,
        "period": list(s.period),
    }


def _stats_from_dict(d: dict[str, Any]) -> FeatureStats:
    start, end = d["period"]
    return FeatureStats(
        names=tuple(d["names"]),
        mean=tuple(float(x) for x in d["mean"]),
        std=tuple(float(x) for x in d["std"]),
        count=int(d["count"]),
        period=(int(start), int(end)),
    )
