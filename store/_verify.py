"""Verification: re-hash stored bytes against a manifest and name what is damaged.

Besides the hashes, a version passes the checks every reader makes when it opens a
record (no symlink in the store, a pack's symbol list and shard indexes), so ``verify``
never says OK on a version that readers refuse.

A segment's chunk is a file, so a file that fails its hash names the chunk. A pack's
shard holds many inner chunks: when one fails, its index is read from the stored bytes
and each inner chunk is hashed against the pack's ``chunk_sha256``, so the damaged
chunks (or the damaged index) are named with their byte ranges.

A chunk that matches its hash must match its recorded CRC-32C too (the check a default
read makes): a CRC-32C that disagrees with its chunk is named, since readers would
refuse the chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ticktensor.errors import StoreCorruptError
from ticktensor.kernels import crc32c

from ._chunk_map import StoredChunk, segment_chunk_map
from ._location import Location
from ._manifest import (
    VERSION_FILE_BYTES,
    ZARR_JSON_BYTES,
    FileEntry,
    Manifest,
    PackRecord,
    SegmentRecord,
    sha256_hex,
)
from ._packs import (
    HASHED,
    check_pack_folder,
    pack_chunk_map,
    read_pack_index,
    recorded_chunk_hashes,
)

__all__ = ["VerifyReport", "verify_manifest"]


@dataclass
class VerifyReport:
    """What a verification checked; ``problems`` is empty when everything matched."""

    version: int
    files_checked: int = 0
    bytes_checked: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


_Expected = tuple[str, str, FileEntry, SegmentRecord | PackRecord | None]


def _expected_files(manifest: Manifest) -> list[_Expected]:
    """(what, path, entry, record) for every stored file, ``what`` naming segment and
    chunk; ``record`` is the segment or pack a file belongs to."""
    out: list[_Expected] = []
    for seg in manifest.segments:
        for name, entry in seg.files.items():
            out.append(
                (
                    f"segment {seg.symbol}/{seg.session} chunk {name}",
                    f"{seg.path}/{name}",
                    entry,
                    seg,
                )
            )
    for pack in manifest.packs:
        for name, entry in pack.files.items():
            out.append((f"pack {pack.session} file {name}", f"{pack.path}/{name}", entry, pack))
    out.extend(
        (f"{tab.kind} table {tab.symbol}/{tab.session}", tab.path, tab.file, None)
        for tab in manifest.tables
    )
    return out


def damaged_chunks(
    location: Location, pack: PackRecord, rel: str, blob: bytes
) -> list[tuple[str, str]]:
    """The inner chunks of the pack shard ``rel`` (stored bytes ``blob``) that do not
    match their recorded sha256, or its index when that is what is damaged; empty when
    the damage cannot be placed (the pack's metadata is damaged too, or the shard's
    size changed), which leaves the whole shard as the damaged file."""
    name = rel.removeprefix(f"{pack.path}/")
    parts = name.split("/")
    entry = pack.files.get(name)
    if parts[0] not in HASHED or len(parts) < 3 or parts[1] != "c" or entry is None:
        return []
    if len(blob) != entry.bytes:
        return []
    try:
        index = read_pack_index(location, pack)
        hashes = recorded_chunk_hashes(location, pack, parts[0])
        shard = int(parts[2])
    except (StoreCorruptError, ValueError, KeyError, TypeError):
        return []
    per_shard = index.shard_rows // index.chunk_rows
    first = shard * per_shard
    last = min(len(hashes), first + per_shard)
    index_at = len(blob) - 16 * per_shard
    if index_at < 0 or first >= last:
        return []
    table = np.frombuffer(blob[index_at:], dtype="<u8").reshape(per_shard, 2)
    where = f"pack {pack.session} {parts[0]}"
    problems = []
    expected_offset = 0
    index_ok = True
    for k in range(first, last):
        offset, nbytes = (int(x) for x in table[k - first])
        index_ok = index_ok and offset == expected_offset
        expected_offset = offset + nbytes
        if offset + nbytes > index_at:
            index_ok = False
            continue
        stored = sha256_hex(blob[offset : offset + nbytes])
        if stored != hashes[k]:
            problems.append(
                (
                    rel,
                    f"{where} chunk {k} (bytes {offset}+{nbytes} of {rel}): content hash "
                    f"mismatch (recorded sha256 {hashes[k][:16]}..., stored {stored[:16]}...)",
                )
            )
    span = f"{where} shard index (bytes {index_at}+{16 * per_shard} of {rel})"
    if not index_ok or expected_offset != index_at:
        problems.insert(0, (rel, f"{span}: damaged, its entries do not tile the chunks"))
    elif not problems:
        problems.append((rel, f"{span}: damaged, every chunk matches its hash"))
    return problems


class _RecordedCrcs:
    """The chunks whose CRC-32C a version records, by the file that holds them: read from
    a record's arrays' metadata when verification reaches its first file. A record whose
    metadata does not match its hashes gives none (that damage is reported as such)."""

    def __init__(self, location: Location) -> None:
        self._location = location
        self._by_record: dict[str, dict[str, list[StoredChunk]]] = {}

    def chunks_in(self, record: SegmentRecord | PackRecord, rel: str) -> list[StoredChunk]:
        """The chunks stored in the file ``rel`` of ``record`` that have a CRC-32C."""
        held = self._by_record.get(record.path)
        if held is None:
            held = self._by_record[record.path] = self._read(record)
        return held.get(rel, [])

    def _read(self, record: SegmentRecord | PackRecord) -> dict[str, list[StoredChunk]]:
        arrays = HASHED if record.label_names else HASHED[:2]
        try:
            if isinstance(record, PackRecord):
                index = read_pack_index(self._location, record)
                maps = [pack_chunk_map(self._location, record, index, a) for a in arrays]
            elif all(self._intact(record, f"{a}/zarr.json") for a in arrays):
                maps = [segment_chunk_map(self._location, record, a) for a in arrays]
            else:
                return {}
        except (OSError, StoreCorruptError):  # reported as damage or as structure
            return {}
        held: dict[str, list[StoredChunk]] = {}
        for chunk_map in maps:
            for chunk in chunk_map.chunks:
                if chunk.crc32c is not None:
                    held.setdefault(chunk.rel, []).append(chunk)
        return held

    def _intact(self, record: SegmentRecord, key: str) -> bool:
        """Whether the segment's file ``key`` is listed and matches its hash (a pack's
        chunk map checks its own)."""
        entry = record.files.get(key)
        data = self._location.read_bytes(f"{record.path}/{key}", limit=ZARR_JSON_BYTES)
        return entry is not None and sha256_hex(data) == entry.sha256


def crc_problems(
    what: str,
    record: SegmentRecord | PackRecord,
    rel: str,
    blob: bytes,
    chunks: Sequence[StoredChunk],
) -> list[tuple[str, str]]:
    """``(rel, why)`` for each of the ``chunks`` stored in the file ``rel`` of ``record``
    (stored bytes ``blob``, which match their recorded hash) whose recorded CRC-32C is not
    the chunk's: the metadata that records it matches its hash too, so the CRC-32C was
    wrong when the record was made, and every default read of the chunk fails."""
    array = rel.removeprefix(f"{record.path}/").split("/", 1)[0]
    view = memoryview(blob)  # slices without copying a shard's chunks
    problems = []
    for chunk in chunks:
        end = len(blob) if chunk.nbytes is None else chunk.offset + chunk.nbytes
        found = crc32c(view[chunk.offset : end])
        if found != chunk.crc32c:
            span = (
                f" chunk {chunk.index} (bytes {chunk.offset}+{end - chunk.offset})"
                if isinstance(record, PackRecord)
                else ""
            )
            problems.append(
                (
                    rel,
                    f"{what}{span}: crc32c {found:08x} != {chunk.crc32c:08x} recorded in "
                    f"{array}/zarr.json, and the chunk matches its sha256",
                )
            )
    return problems


def structure_problems(
    location: Location, manifest: Manifest, damaged: set[str]
) -> list[tuple[str, str]]:
    """``(path, why)`` for each record a reader would refuse when it opens it: a folder
    holding a symlink, or a pack whose symbol list, offsets or shard indexes are not
    well formed. Packs with a file in ``damaged`` (already reported) are skipped."""
    out: list[tuple[str, str]] = []
    for rel, where in [
        *((seg.path, f"segment {seg.symbol}/{seg.session}") for seg in manifest.segments),
        *((tab.path, f"{tab.kind} table {tab.symbol}/{tab.session}") for tab in manifest.tables),
    ]:
        try:
            location.refuse_links(rel, below=True, where=where)
        except StoreCorruptError as exc:
            out.append((rel, str(exc)))
    for pack in manifest.packs:
        if any(rel.startswith(f"{pack.path}/") for rel in damaged):
            continue
        try:
            check_pack_folder(location, pack)
            index = read_pack_index(location, pack)
            for array in HASHED if pack.label_names else HASHED[:2]:
                pack_chunk_map(location, pack, index, array)
        except StoreCorruptError as exc:
            out.append((pack.path, str(exc)))
    return out


def verify_manifest(
    location: Location,
    manifest: Manifest,
    manifest_rel: str,
    manifest_sha256: str,
    on_file: Callable[[str, int], None] | None = None,
    problems: Sequence[tuple[str, str]] = (),
) -> VerifyReport:
    """Check the manifest's own hash, then every file it lists, then the structure
    readers check when they open its records (:func:`structure_problems`).

    ``problems`` are ``(path, why)`` found before (the log's own checks). Raises
    :class:`StoreCorruptError` listing every problem, after checking all files.
    """
    report = VerifyReport(version=manifest.version, problems=list(problems))
    data = location.read_bytes(manifest_rel, limit=VERSION_FILE_BYTES)
    if sha256_hex(data) != manifest_sha256:
        report.problems.append(
            (
                manifest_rel,
                f"manifest sha256 {sha256_hex(data)[:16]} != recorded {manifest_sha256[:16]}",
            )
        )
    crcs = _RecordedCrcs(location)
    for what, rel, entry, record in _expected_files(manifest):
        try:
            blob = location.read_bytes(rel)
        except FileNotFoundError:
            report.problems.append((rel, f"{what}: file is missing"))
            continue
        except StoreCorruptError as exc:  # a symlink
            report.problems.append((rel, f"{what}: {exc}"))
            continue
        report.files_checked += 1
        report.bytes_checked += len(blob)
        digest = sha256_hex(blob)
        if len(blob) != entry.bytes or digest != entry.sha256:
            pack = record if isinstance(record, PackRecord) else None
            located = [] if pack is None else damaged_chunks(location, pack, rel, blob)
            report.problems.extend(
                located
                or [
                    (
                        rel,
                        f"{what}: content hash mismatch (manifest sha256 {entry.sha256[:16]}..., "
                        f"{entry.bytes} bytes; stored {digest[:16]}..., {len(blob)} bytes)",
                    )
                ]
            )
        elif record is not None:
            report.problems.extend(
                crc_problems(what, record, rel, blob, crcs.chunks_in(record, rel))
            )
        if on_file is not None:
            on_file(rel, len(blob))
    damaged = {rel for rel, _ in report.problems}
    report.problems.extend(structure_problems(location, manifest, damaged))
    if report.problems:
        lines = "\n".join(f"  {location.display(rel)}: {why}" for rel, why in report.problems)
        raise StoreCorruptError(
            f"store version {manifest.version} is damaged: {len(report.problems)} problem(s)\n"
            f"{lines}",
            problems=report.problems,
        )
    return report
