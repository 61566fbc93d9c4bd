"""Manifests: the full, hashed description of one store version (v1 files, v2 checkpoints)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError, FormatVersionError, StoreCorruptError

from ._location import check_relative

__all__ = [
    "ALL_SYMBOLS",
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "POINTER_BYTES",
    "VERSION_FILE_BYTES",
    "ZARR_JSON_BYTES",
    "FeatureStats",
    "FileEntry",
    "Manifest",
    "PackRecord",
    "SegmentRecord",
    "SourceFile",
    "TableRecord",
    "canonical_json",
    "check_record_paths",
    "load_json",
    "sha256_hex",
]

#: The store format this ticktensor writes (docs/store-format.md).
FORMAT_VERSION = 2
#: The ``symbol`` of a table's key when the table holds every symbol of its session (its
#: ``symbol`` column says whose each row is): a key, not one of the store's symbols.
ALL_SYMBOLS = "*"
#: Every store format this ticktensor reads.
READABLE_FORMAT_VERSIONS = (1, 2)
#: ``format`` and ``format_version`` of a full-state file: a v1 version file, or a v2
#: checkpoint (the same fields under another name, so neither passes for the other).
# A tuple, not a set: membership of a (format, version) read from a file must not hash
# whatever JSON value the version is (a list would raise TypeError).
MANIFEST_FORMATS = (("ticktensor.manifest", 1), ("ticktensor.checkpoint", 2))

# The most bytes of each kind of JSON document a reader reads; a larger file is refused
# before it is read, since a parsed document takes ~30x its size in memory. Each limit
# is far above what ticktensor writes.
#: ``latest.json`` (about 200 bytes).
POINTER_BYTES = 64 << 10
#: ``ticktensor.json``, the store header (under 1 KB).
HEADER_BYTES = 1 << 20
#: A version file (log entry or format-1 manifest) or a checkpoint: about 750 bytes per
#: segment record, so a format-1 manifest of 100,000 (symbol, session) pairs is ~75 MB.
VERSION_FILE_BYTES = 256 << 20
#: A ``zarr.json`` of a segment or a pack; a pack's group lists every symbol and its
#: offset (~25 bytes each: 100,000 symbols are ~2.5 MB).
ZARR_JSON_BYTES = 64 << 20


def sha256_hex(data: bytes | memoryview) -> str:
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

    def scale(
        self, names: Iterable[str]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """``(mean, std)`` of ``names`` as float32, a std that is not finite and positive
        taken as 1: what ``WindowDataset(normalize=True)`` and the live engine's windows
        apply, ``(x - mean) / std``, from one place so that the two cannot differ."""
        wanted = list(names)
        missing = [n for n in wanted if n not in self.names]
        if missing:
            raise ConfigError(f"the store's feature statistics lack {missing}")
        pos = [self.names.index(n) for n in wanted]
        mean = np.array([self.mean[p] for p in pos], dtype=np.float32)
        std = np.array([self.std[p] for p in pos], dtype=np.float32)
        std = np.where(np.isfinite(std) & (std > 0), std, np.float32(1)).astype(np.float32)
        return mean, std


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
class PackRecord:
    """One immutable pack: every symbol's feature rows of one session, in one Zarr group.

    Rows are sorted by (symbol, ts); which rows belong to which symbol is the pack's
    offsets index, kept inside the pack (``store._packs.PackIndex``), so a record costs
    the same at any number of symbols. ``files`` maps every object below ``path`` to its
    hash and size, as for segments.
    """

    session: str
    path: str
    rows: int
    symbols: int
    ts_start: int
    ts_end: int
    layout: Mapping[str, Any]
    content_hash: str
    files: Mapping[str, FileEntry]
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...] = ()
    sources: tuple[SourceFile, ...] = ()

    @property
    def key(self) -> tuple[str]:
        return (self.session,)

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
    """Everything one store version contains. Serialized as canonical JSON.

    Format 1 stored one such file per version; format 2 stores one as a checkpoint
    every few versions (:meth:`to_json` writes that form) and a small log entry per
    version in between (:mod:`._log`).
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
    stats: FeatureStats | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)
    packs: tuple[PackRecord, ...] = ()

    @property
    def symbols(self) -> tuple[str, ...]:
        """Symbols of the segments and of the tables of one symbol (a pack's symbols, and
        those of a table of every symbol, are inside it: :attr:`StoreVersion.symbols`
        reads the packs')."""
        tables = {t.symbol for t in self.tables if t.symbol != ALL_SYMBOLS}
        return tuple(sorted({s.symbol for s in self.segments} | tables))

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments) + sum(p.rows for p in self.packs)

    @property
    def nbytes(self) -> int:
        return (
            sum(s.nbytes for s in self.segments)
            + sum(p.nbytes for p in self.packs)
            + sum(t.nbytes for t in self.tables)
        )

    def evolve(self, **changes: Any) -> Manifest:
        return replace(self, **changes)

    def to_json(self) -> bytes:
        """Canonical JSON of the full state: a format-2 checkpoint."""
        doc = {
            "format": "ticktensor.checkpoint",
            "format_version": FORMAT_VERSION,
            **version_fields(self),
        }
        return canonical_json(doc)

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Manifest:
        """Parse and check a v1 manifest or a v2 checkpoint.

        Manifests are data read from storage: every field is type-checked and every
        path must stay inside the store (``segments/``, ``events/``). Anything
        malformed raises ``StoreCorruptError``; an unknown format version raises
        ``FormatVersionError``.
        """
        return cls.from_doc(load_json(data, where, "manifest"), where)

    @classmethod
    def from_doc(cls, doc: object, where: str) -> Manifest:
        """:meth:`from_json` of an already decoded JSON document."""
        names = [name for name, _ in MANIFEST_FORMATS]
        if not isinstance(doc, dict) or not any(doc.get("format") == n for n in names):
            raise StoreCorruptError(f"{where}: not a ticktensor manifest or checkpoint")
        kind, fv = doc["format"], doc.get("format_version")
        if isinstance(fv, bool) or (kind, fv) not in MANIFEST_FORMATS:
            raise FormatVersionError(
                f"{where}: {kind} format version {fv!r}; this ticktensor reads "
                + ", ".join(f"{name} {v}" for name, v in sorted(MANIFEST_FORMATS))
            )
        try:
            features = _names(doc["feature_names"])
            labels = _names(doc["label_names"])
            parent = doc["parent"]
            manifest = cls(
                version=_int(doc["version"]),
                parent=None if parent is None else _int(parent),
                parent_sha256=None if doc["parent_sha256"] is None else _hex(doc["parent_sha256"]),
                created=_str(doc["created"]),
                message=_str(doc["message"]),
                feature_names=features,
                label_names=labels,
                stats=None if doc["stats"] is None else _stats_from_dict(doc["stats"]),
                attributes=_dict(doc["attributes"]),
                segments=tuple(_segment_from_dict(s, features, labels) for s in doc["segments"]),
                tables=tuple(_table_from_dict(t) for t in doc["tables"]),
                packs=tuple(
                    _pack_from_dict(p, features, labels) for p in _list(doc.get("packs", []))
                ),
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
            raise StoreCorruptError(
                f"{where}: manifest field missing or malformed: {type(exc).__name__} {exc}"
            ) from None
        check_record_paths(manifest.segments, manifest.tables, where, manifest.packs)
        return manifest


def check_record_paths(
    segments: Iterable[SegmentRecord],
    tables: Iterable[TableRecord],
    where: str,
    packs: Iterable[PackRecord] = (),
) -> None:
    """Every path a record names stays inside the store (``segments/``, ``packs/``,
    ``events/``)."""
    for seg in segments:
        what = f"{where}: segment {seg.symbol}/{seg.session}"
        check_relative(seg.path, what, prefix="segments/")
        for name in seg.files:
            check_relative(name, f"{what} file")
    for pack in packs:
        what = f"{where}: pack {pack.session}"
        check_relative(pack.path, what, prefix="packs/")
        for name in pack.files:
            check_relative(name, f"{what} file")
    for tab in tables:
        check_relative(tab.path, f"{where}: {tab.kind} table {tab.symbol}", prefix="events/")


def canonical_json(doc: Mapping[str, Any]) -> bytes:
    """Compact JSON with sorted keys and no NaN: equal documents are equal bytes."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.encode() + b"\n"


def load_json(data: bytes, where: str, what: str) -> Any:
    """Strict JSON of a store file: UTF-8, no NaN/Infinity, bounded nesting.

    Raises :class:`StoreCorruptError` naming ``where`` for anything else.
    """
    try:
        return json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:  # JSON and UTF-8 errors are ValueErrors
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise StoreCorruptError(f"{where}: {what} is not valid JSON ({reason})") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as inf, which JSON cannot write back
        raise ValueError(f"{text[:30]} is out of the range of a double")
    return value


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r:.60}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r:.60}")
    return value


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def _hex(value: object) -> str:
    text = _str(value)
    if _SHA256_HEX.fullmatch(text) is None:
        raise ValueError(f"expected a sha256 hex digest, got {text!r:.80}")
    return text


def _dict(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {value!r:.60}")
    return value


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {value!r:.60}")
    return value


def _names(value: object) -> tuple[str, ...]:
    return tuple(_str(v) for v in _list(value))


def _entry(value: object) -> FileEntry:
    sha, size = _list(value)
    if _int(size) < 0:
        raise ValueError(f"negative file size {size}")
    return FileEntry(_hex(sha), size)


def _files_to_dict(files: Mapping[str, FileEntry]) -> dict[str, list[Any]]:
    return {k: [v.sha256, v.bytes] for k, v in sorted(files.items())}


def _sources_to_list(sources: tuple[SourceFile, ...]) -> list[dict[str, Any]]:
    return [{"path": s.path, "sha256": s.sha256, "bytes": s.bytes} for s in sources]


def _sources_from_list(items: list[dict[str, Any]]) -> tuple[SourceFile, ...]:
    return tuple(
        SourceFile(_str(s["path"]), _str(s["sha256"]), _int(s["bytes"])) for s in _list(items)
    )


def _stored_to_dict(
    rec: SegmentRecord | PackRecord,
    what: str,
    feature_names: tuple[str, ...],
    label_names: tuple[str, ...],
) -> dict[str, Any]:
    """The fields a segment and a pack record share. Every record of a version shares the
    version's feature and label names (commit enforces it), so they are stored once, at
    the top."""
    if rec.feature_names != feature_names or rec.label_names != label_names:
        raise ValueError(f"{what} has other feature names than its version")
    return {
        "session": rec.session,
        "path": rec.path,
        "rows": rec.rows,
        "ts_start": rec.ts_start,
        "ts_end": rec.ts_end,
        "layout": dict(rec.layout),
        "content_hash": rec.content_hash,
        "files": _files_to_dict(rec.files),
        "sources": _sources_to_list(rec.sources),
    }


def _stored_from_dict(
    d: dict[str, Any], feature_names: tuple[str, ...], label_names: tuple[str, ...]
) -> dict[str, Any]:
    """The shared fields of a segment or pack record, checked, as constructor keywords."""
    rows = _int(d["rows"])
    if rows < 0:
        raise ValueError(f"negative row count {rows}")
    return {
        "feature_names": feature_names,
        "label_names": label_names,
        "session": _str(d["session"]),
        "path": _str(d["path"]),
        "rows": rows,
        "ts_start": _int(d["ts_start"]),
        "ts_end": _int(d["ts_end"]),
        "layout": _dict(d["layout"]),
        "content_hash": _hex(d["content_hash"]),
        "files": {_str(k): _entry(v) for k, v in _dict(d["files"]).items()},
        "sources": _sources_from_list(d["sources"]),
    }


def _segment_to_dict(
    s: SegmentRecord, feature_names: tuple[str, ...], label_names: tuple[str, ...]
) -> dict[str, Any]:
    what = f"segment {s.symbol}/{s.session}"
    return {"symbol": s.symbol, **_stored_to_dict(s, what, feature_names, label_names)}


def _segment_from_dict(
    d: dict[str, Any], feature_names: tuple[str, ...], label_names: tuple[str, ...]
) -> SegmentRecord:
    d = _dict(d)
    return SegmentRecord(
        symbol=_str(d["symbol"]), **_stored_from_dict(d, feature_names, label_names)
    )


def _pack_to_dict(
    p: PackRecord, feature_names: tuple[str, ...], label_names: tuple[str, ...]
) -> dict[str, Any]:
    what = f"pack {p.session}"
    return {"symbols": p.symbols, **_stored_to_dict(p, what, feature_names, label_names)}


def _pack_from_dict(
    d: dict[str, Any], feature_names: tuple[str, ...], label_names: tuple[str, ...]
) -> PackRecord:
    d = _dict(d)
    symbols = _int(d["symbols"])
    if symbols < 0:
        raise ValueError(f"negative symbol count {symbols}")
    return PackRecord(symbols=symbols, **_stored_from_dict(d, feature_names, label_names))


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
    d = _dict(d)
    return TableRecord(
        kind=_str(d["kind"]),
        symbol=_str(d["symbol"]),
        session=_str(d["session"]),
        path=_str(d["path"]),
        rows=_int(d["rows"]),
        ts_start=None if d["ts_start"] is None else _int(d["ts_start"]),
        ts_end=None if d["ts_end"] is None else _int(d["ts_end"]),
        file=_entry(d["file"]),
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
    d = _dict(d)
    start, end = _list(d["period"])
    return FeatureStats(
        names=_names(d["names"]),
        mean=tuple(_float(x) for x in _list(d["mean"])),
        std=tuple(_float(x) for x in _list(d["std"])),
        count=_int(d["count"]),
        period=(_int(start), _int(end)),
    )


def _float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r:.60}")
    return float(value)


class _VersionFields(Protocol):
    """What a checkpoint and a log entry both record of a version."""

    @property
    def version(self) -> int: ...

    @property
    def parent(self) -> int | None: ...

    @property
    def parent_sha256(self) -> str | None: ...

    @property
    def created(self) -> str: ...

    @property
    def message(self) -> str: ...

    @property
    def feature_names(self) -> tuple[str, ...]: ...

    @property
    def label_names(self) -> tuple[str, ...]: ...

    @property
    def stats(self) -> FeatureStats | None: ...

    @property
    def attributes(self) -> Mapping[str, Any]: ...

    @property
    def segments(self) -> tuple[SegmentRecord, ...]: ...

    @property
    def tables(self) -> tuple[TableRecord, ...]: ...

    @property
    def packs(self) -> tuple[PackRecord, ...]: ...


def version_fields(v: _VersionFields) -> dict[str, Any]:
    """The JSON fields a checkpoint and a log entry share: the version, its parent, names,
    statistics, attributes, and its segments, packs and tables (all, or those it adds)."""
    return {
        "version": v.version,
        "parent": v.parent,
        "parent_sha256": v.parent_sha256,
        "created": v.created,
        "message": v.message,
        "feature_names": list(v.feature_names),
        "label_names": list(v.label_names),
        "stats": None if v.stats is None else _stats_to_dict(v.stats),
        "attributes": dict(v.attributes),
        "segments": [_segment_to_dict(s, v.feature_names, v.label_names) for s in v.segments],
        "tables": [_table_to_dict(t) for t in v.tables],
        "packs": [_pack_to_dict(p, v.feature_names, v.label_names) for p in v.packs],
    }
