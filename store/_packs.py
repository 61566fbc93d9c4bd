"""Packs: every symbol's feature rows of one session in one Zarr v3 group of sharded arrays.

A pack replaces the one-group-per-(symbol, session) segments of a wide universe. Its
rows are sorted by (symbol, ts); the group's attributes hold the sorted symbols and the
offsets index (symbol ``i`` holds rows ``offsets[i]:offsets[i+1]``). The row arrays
``ts``, ``values`` and ``labels`` use the core ``sharding_indexed`` codec: inner chunks
of ``chunk_rows`` rows (the unit a reader decodes) inside shards of up to
:data:`SHARD_BYTES` of decoded values (one object each), so a session is a handful of
objects whatever its number of symbols. ``chunk_sha256 [arrays, chunks, 32]`` holds the
sha256 of every inner chunk's stored bytes, so a reader can check one byte range and
``verify`` names the damaged chunk. See docs/store-format.md, "Packs".
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import zarr

from ticktensor.errors import FormatVersionError, SchemaError, StoreCorruptError

from ._blocks import SymbolRows
from ._chunk_map import CRC_ATTRIBUTE, ChunkMap, StoredChunk, codec_of, recorded_crcs
from ._guard import GuardedPackStore
from ._layout import Layout
from ._location import Location, safe_component
from ._manifest import ZARR_JSON_BYTES, FileEntry, PackRecord, sha256_hex
from ._segments import check_rows
from ._zarr_write import padded_chunk
from .codecs import ChunkCodec

__all__ = [
    "PACK_FORMAT_VERSION",
    "SHARD_BYTES",
    "PackData",
    "PackIndex",
    "content_hash_of_chunks",
    "open_pack",
    "pack_chunk_map",
    "pack_content_hash",
    "pack_layout",
    "raw_chunk_digests",
    "read_pack_index",
    "recorded_chunk_hashes",
]

#: Format of a pack's Zarr group; part of its content hash.
PACK_FORMAT_VERSION: Final = 2
#: Decoded bytes of ``values`` per shard, at most (a shard is one object).
SHARD_BYTES: Final = 256 << 20
#: The arrays whose inner chunks ``chunk_sha256`` hashes, in its order.
HASHED: Final = ("ts", "values", "labels")

Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]


@dataclass(frozen=True)
class PackIndex:
    """Which rows of a pack belong to which symbol (read from the pack's group)."""

    record: PackRecord
    symbols: tuple[str, ...]
    offsets: Int64s
    chunk_rows: int
    shard_rows: int
    #: The pack format the pack was written in (it decides how its content hash is made).
    format_version: int = PACK_FORMAT_VERSION
    #: Whether each array's ``zarr.json`` lists its inner chunks' CRC-32C (the group's
    #: ``chunk_checksum``; packs written before CRC-32C were recorded list none).
    crc32c: bool = False

    def rows_of(self, symbol: str) -> tuple[int, int]:
        """Rows ``[lo, hi)`` of ``symbol``; ``KeyError`` when the pack does not hold it."""
        lo, hi, held = self.rows_of_many([symbol])
        if not held[0]:
            raise KeyError(f"pack {self.record.session} holds no rows of {symbol!r}")
        return int(lo[0]), int(hi[0])

    def rows_of_many(
        self, symbols: Sequence[str] | npt.NDArray[np.str_]
    ) -> tuple[Int64s, Int64s, npt.NDArray[np.bool_]]:
        """Rows ``[lo, hi)`` of each of ``symbols`` at once, and whether the pack holds it
        (where it does not, ``lo`` and ``hi`` are meaningless)."""
        return self.symbol_rows.rows_of_many(symbols)

    @property
    def symbol_rows(self) -> SymbolRows:
        """The pack's symbols and their rows, as every block gives them."""
        return SymbolRows(self.symbols, self.offsets)


@dataclass(frozen=True)
class PackData:
    """A pack read fully into memory."""

    symbols: tuple[str, ...]
    offsets: Int64s
    ts: Int64s
    values: Floats
    labels: Floats | None


def check_pack_inputs(
    session: str,
    symbols: Sequence[str],
    offsets: Int64s,
    ts: Int64s,
    values: Floats,
    labels: Floats | None,
    feature_names: Sequence[str],
    label_names: Sequence[str],
) -> None:
    """A pack's arrays must be typed, shaped and ordered as the format says."""
    where = f"pack {session}"
    if list(symbols) != sorted(set(symbols)) or not symbols:
        raise SchemaError(f"{where}: symbols must be non-empty, distinct and sorted")
    if not all(symbols):  # every other name has a path component (safe_component)
        raise ValueError("a symbol or session name must not be empty")
    n = check_rows(ts, values, labels, feature_names, label_names, where)
    if offsets.dtype != np.int64 or offsets.shape != (len(symbols) + 1,):
        raise SchemaError(
            f"{where}: offsets must be int64 [{len(symbols) + 1}] (symbols + 1), got "
            f"{offsets.dtype} {list(offsets.shape)}"
        )
    if offsets[0] != 0 or offsets[-1] != n or (np.diff(offsets) < 0).any():
        raise SchemaError(
            f"{where}: offsets must rise from 0 to the {n} rows, got {offsets[0]}..{offsets[-1]}"
        )
    # ts non-decreasing within each symbol: a fall is allowed only where a symbol starts.
    falls = np.flatnonzero(np.diff(ts) < 0) + 1
    bad = falls[~np.isin(falls, offsets)]
    if bad.size:
        row = int(bad[0])
        symbol = symbols[int(np.searchsorted(offsets, row, side="right")) - 1]
        raise SchemaError(
            f"{where}: ts of {symbol} must be non-decreasing; row {row} has {int(ts[row])} "
            f"after {int(ts[row - 1])}"
        )


def pack_content_hash(
    session: str,
    symbols: Sequence[str],
    offsets: Int64s,
    ts: Int64s,
    values: Floats,
    labels: Floats | None,
    feature_names: Sequence[str],
    label_names: Sequence[str],
    layout: Layout,
    format_version: int = PACK_FORMAT_VERSION,
) -> str:
    """Hash of a pack's logical content and layout from its arrays, as a pack of
    ``format_version`` names itself: equal inputs give equal packs.

    Format 2 hashes the raw bytes of each inner chunk (see :func:`content_hash_of_chunks`);
    format 1 hashed the arrays whole, after the header.
    """
    header = _header(session, symbols, feature_names, label_names, layout, int(ts.shape[0]))
    arrays: list[npt.NDArray[Any]] = [ts, values]
    if label_names and labels is not None:
        arrays.append(labels)
    if format_version == 1:
        h = hashlib.sha256(json.dumps({**header, "format_version": 1}, sort_keys=True).encode())
        for part in (offsets, *arrays):
            h.update(np.ascontiguousarray(part).data)
        return h.hexdigest()
    chunk_rows = min(layout.chunk_rows, int(ts.shape[0]))
    return content_hash_of_chunks(
        session,
        symbols,
        offsets,
        int(ts.shape[0]),
        [raw_chunk_digests(a, chunk_rows) for a in arrays],
        feature_names,
        label_names,
        layout,
    )


def content_hash_of_chunks(
    session: str,
    symbols: Sequence[str],
    offsets: Int64s,
    rows: int,
    chunk_digests: Sequence[Sequence[bytes]],
    feature_names: Sequence[str],
    label_names: Sequence[str],
    layout: Layout,
) -> str:
    """The content hash of a pack (format 2) from the sha256 of each inner chunk's raw
    bytes (:func:`raw_chunk_digests`) of ``ts``, ``values`` and ``labels``.

    ``sha256`` over the JSON header, the bytes of ``offsets`` (int64), then every
    array's chunk digests in order: it needs no pass over the rows beyond the one that
    hashes each chunk as it is stored.
    """
    header = _header(session, symbols, feature_names, label_names, layout, rows)
    h = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    h.update(np.ascontiguousarray(offsets, dtype="<i8").data)
    for digests in chunk_digests:
        h.update(b"".join(digests))
    return h.hexdigest()


def raw_chunk_digests(data: npt.NDArray[Any], chunk_rows: int) -> list[bytes]:
    """The sha256 of each ``chunk_rows``-row chunk of ``data`` as raw little-endian bytes,
    the last one padded to full size with the fill value (NaN; 0 for integers)."""
    little = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<"), copy=False)
    digests = []
    for lo in range(0, little.shape[0], chunk_rows):
        chunk = padded_chunk(little[lo : lo + chunk_rows], chunk_rows)
        digests.append(hashlib.sha256(chunk.data.cast("B")).digest())
    return digests


def _header(
    session: str,
    symbols: Sequence[str],
    feature_names: Sequence[str],
    label_names: Sequence[str],
    layout: Layout,
    rows: int,
) -> dict[str, Any]:
    return {
        "format_version": PACK_FORMAT_VERSION,
        "session": session,
        "symbols": list(symbols),
        "feature_names": list(feature_names),
        "label_names": list(label_names),
        "layout": layout.to_dict(),
        "rows": rows,
    }


def pack_path(session: str, content_hash: str) -> str:
    return f"packs/{safe_component(session)}-{content_hash[:16]}"


def chunks_per_shard(columns: int, chunk_rows: int) -> int:
    """Inner chunks per shard: as many as :data:`SHARD_BYTES` of values hold."""
    return max(1, SHARD_BYTES // max(1, columns * 4 * chunk_rows))


def shard_rows_for(rows: int, columns: int, chunk_rows: int) -> int:
    """Rows per shard: every row in one shard, up to :data:`SHARD_BYTES` of values."""
    per_shard = chunks_per_shard(columns, chunk_rows)
    return chunk_rows * min(per_shard, max(1, math.ceil(rows / chunk_rows)))


def _checked_read(location: Location, record: PackRecord, key: str) -> bytes:
    """A small object of the pack, read whole and checked against its recorded hash."""
    entry = record.files.get(key)
    rel = f"{record.path}/{key}"
    where = f"pack {record.session} ({location.display(rel)})"
    if entry is None:
        raise StoreCorruptError(f"{where}: not listed in the pack's record", [(rel, "unlisted")])
    limit = ZARR_JSON_BYTES if key.endswith("zarr.json") else None  # parsed: bounded
    try:
        data = location.read_bytes(rel, limit=limit)
    except FileNotFoundError:
        raise StoreCorruptError(f"{where}: file is missing", [(rel, "missing")]) from None
    if len(data) != entry.bytes or sha256_hex(data) != entry.sha256:
        raise StoreCorruptError(
            f"{where}: content hash mismatch (recorded sha256 {entry.sha256[:16]}...)",
            [(rel, "hash mismatch")],
        )
    return data


def read_pack_index(location: Location, record: PackRecord) -> PackIndex:
    """The pack's symbols and offsets, from its group's ``zarr.json`` (hash-checked)."""
    where = f"pack {record.session} ({location.display(record.path)})"
    data = _checked_read(location, record, "zarr.json")
    try:
        attrs = json.loads(data)["attributes"]["ticktensor"]
        symbols = _symbol_list(attrs["symbols"], where)
        offsets = np.asarray(attrs["offsets"], dtype=np.int64)
        chunk_rows, shard_rows = int(attrs["chunk_rows"]), int(attrs["shard_rows"])
        format_version = int(attrs["format_version"])
        checksum = attrs.get("chunk_checksum")
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        raise StoreCorruptError(f"{where}: pack attributes malformed ({exc!r:.200})") from None
    if checksum not in (None, CRC_ATTRIBUTE):
        raise FormatVersionError(
            f"{where}: the pack records chunk checksums {checksum!r:.60}, this ticktensor "
            f"reads {CRC_ATTRIBUTE!r}; upgrade ticktensor"
        )
    if (
        len(symbols) != record.symbols
        or offsets.shape != (len(symbols) + 1,)
        or offsets[0] != 0
        or offsets[-1] != record.rows
        or (np.diff(offsets) < 0).any()
        or chunk_rows < 1
        or shard_rows < chunk_rows
        or shard_rows % chunk_rows
    ):
        raise StoreCorruptError(
            f"{where}: offsets index does not describe the record's {record.rows} rows of "
            f"{record.symbols} symbols"
        )
    if format_version not in (1, PACK_FORMAT_VERSION):
        raise FormatVersionError(
            f"{where}: pack format_version {format_version} is not one this ticktensor "
            f"reads (1..{PACK_FORMAT_VERSION}); upgrade ticktensor"
        )
    return PackIndex(
        record, symbols, offsets, chunk_rows, shard_rows, format_version, checksum is not None
    )


def _symbol_list(value: object, where: str) -> tuple[str, ...]:
    """A pack's symbol list as read: non-empty, distinct names in sorted order (readers
    find a symbol's rows by binary search), or a ``StoreCorruptError`` naming the entry."""
    if not isinstance(value, list) or not value:
        raise StoreCorruptError(
            f"{where}: symbol list is {value!r:.60}, expected a non-empty list of names "
            "(rule: pack_symbols)"
        )
    for i, name in enumerate(value):
        if not isinstance(name, str):
            why = f"is {type(name).__name__}, expected a string"
        elif not name:
            why = "is empty"
        elif i and name <= value[i - 1]:
            why = f"follows {value[i - 1]!r:.60}: names must be sorted and distinct"
        else:
            continue
        raise StoreCorruptError(
            f"{where}: symbol list entry {i} {name!r:.60} {why} (rule: pack_symbols)",
            [(where, f"symbol list entry {i}")],
        )
    return tuple(value)


def _inner_codec(meta: dict[str, Any]) -> ChunkCodec | None:
    (sharding,) = meta["codecs"]
    config = sharding["configuration"]
    return codec_of({**meta, "codecs": config["codecs"]})


def pack_chunk_map(
    location: Location, record: PackRecord, index: PackIndex, array: str
) -> ChunkMap:
    """Every inner chunk of the pack's ``array`` as a byte range of its shard.

    Reads the array's ``zarr.json`` and each shard's index (a ranged read at its end);
    checks them against the record; the chunks' hashes come from ``chunk_sha256`` and their
    CRC-32C from the array's attribute ``chunk_crc32c`` (required where the group says the
    pack records them; packs written before record none).
    """
    rel = f"{record.path}/{array}"
    where = f"pack {record.session} array {array!r} ({location.display(rel)})"
    meta_bytes = _checked_read(location, record, f"{array}/zarr.json")
    try:
        meta = json.loads(meta_bytes)
        shape = [int(n) for n in meta["shape"]]
        shard_rows = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
        (sharding,) = meta["codecs"]
        chunk_rows = int(sharding["configuration"]["chunk_shape"][0])
        codec = _inner_codec(meta)
    except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
        raise StoreCorruptError(f"{where}: unreadable sharded array metadata ({exc})") from None
    layout = pack_layout(record)
    if codec is not layout.chunk_codec:
        tag = "zarr" if codec is None else codec.tag
        raise StoreCorruptError(
            f"{where}: stored with codec {tag!r}; the record says {layout.codec.value} "
            "(rule: pack_metadata)"
        )
    if (
        not shape
        or shape[0] != record.rows
        or chunk_rows != index.chunk_rows
        or shard_rows != index.shard_rows
        or sharding.get("name") != "sharding_indexed"
    ):
        raise StoreCorruptError(
            f"{where}: array of shape {shape}, shards of {shard_rows} rows, chunks of "
            f"{chunk_rows}; the pack says {record.rows} rows, {index.shard_rows}, "
            f"{index.chunk_rows}"
        )
    columns = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    hashes = recorded_chunk_hashes(location, record, array)
    n_chunks = -(-record.rows // chunk_rows)
    if len(hashes) < n_chunks:
        raise StoreCorruptError(
            f"{where}: chunk_sha256 holds {len(hashes)} hashes of {array!r}, for {n_chunks} chunks"
        )
    crcs = recorded_crcs(meta, n_chunks, where, required=index.crc32c)
    per_shard = shard_rows // chunk_rows
    suffix = "/0" * (len(shape) - 1)
    itemsize = 8 if array == "ts" else 4
    chunks: list[StoredChunk] = []
    for shard in range(-(-n_chunks // per_shard)):
        key = f"{array}/c/{shard}{suffix}"
        end = 0  # of the previous chunk: entries are in order and disjoint
        entry = record.files.get(key)
        if entry is None:
            raise StoreCorruptError(f"{where}: shard {key} is not listed", [(key, "unlisted")])
        table = _shard_index(location, f"{record.path}/{key}", entry, per_shard, where)
        for j in range(min(per_shard, n_chunks - shard * per_shard)):
            k = shard * per_shard + j
            offset, nbytes = int(table[j, 0]), int(table[j, 1])
            decoded = chunk_rows * columns * itemsize
            if offset + nbytes > entry.bytes - 16 * per_shard or (
                codec is not None and codec.stores_decoded and nbytes != decoded
            ):
                raise StoreCorruptError(
                    f"{where}: shard {key} indexes chunk {k} at bytes {offset}+{nbytes}, "
                    f"outside its data",
                    [(key, "bad shard index")],
                )
            if offset < end:
                raise StoreCorruptError(
                    f"{where}: shard {key} indexes chunk {k} at bytes {offset}+{nbytes}, "
                    f"before the end of chunk {k - 1} at byte {end}: the index's entries "
                    "must be in order and must not overlap",
                    [(key, "bad shard index")],
                )
            end = offset + nbytes
            chunks.append(
                StoredChunk(
                    rel=f"{record.path}/{key}",
                    offset=offset,
                    nbytes=nbytes,
                    index=k,
                    row_start=k * chunk_rows,
                    rows=min(chunk_rows, record.rows - k * chunk_rows),
                    stored_rows=chunk_rows,
                    columns=columns,
                    codec=codec,
                    sha256=hashes[k],
                    crc32c=crcs[k],
                    array=array,
                    owner=f"pack {record.session}",
                    record=record,
                )
            )
    return ChunkMap(array, record.rows, chunk_rows, tuple(chunks))


def _shard_index(
    location: Location, rel: str, entry: FileEntry, per_shard: int, where: str
) -> npt.NDArray[np.uint64]:
    size = 16 * per_shard
    if entry.bytes < size:
        raise StoreCorruptError(f"{where}: shard {rel} is shorter than its index")
    try:
        data = location.read_range(rel, entry.bytes - size, entry.bytes)
    except FileNotFoundError:
        raise StoreCorruptError(f"{where}: shard {rel} is missing", [(rel, "missing")]) from None
    except OSError as exc:  # a directory in its place, an I/O error
        raise StoreCorruptError(
            f"{where}: shard {rel} cannot be read ({exc.strerror or exc})", [(rel, "unreadable")]
        ) from exc
    if len(data) != size:
        raise StoreCorruptError(
            f"{where}: shard {rel} is {len(data)} bytes short of its recorded size",
            [(rel, "wrong size")],
        )
    return np.frombuffer(data, dtype="<u8").reshape(per_shard, 2).astype(np.uint64)


def recorded_chunk_hashes(location: Location, record: PackRecord, array: str) -> list[str]:
    """The recorded sha256 of each inner chunk of ``array`` (every pack records them)."""
    where = f"pack {record.session} ({location.display(record.path)})"
    if "chunk_sha256/zarr.json" not in record.files:
        raise StoreCorruptError(f"{where}: the record lists no chunk_sha256 array")
    document = _checked_read(location, record, "chunk_sha256/zarr.json")
    try:
        meta = json.loads(document)
        names = list(meta["attributes"]["arrays"])
        shape = [int(n) for n in meta["shape"]]
    except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
        raise StoreCorruptError(
            f"{where}: unreadable chunk_sha256 metadata ({exc!r})",
            [(f"{record.path}/chunk_sha256/zarr.json", "malformed")],
        ) from None
    if array not in names or len(shape) != 3 or shape[0] != len(names) or shape[2] != 32:
        raise StoreCorruptError(f"{where}: chunk_sha256 holds no hashes of {array!r}")
    raw = _checked_read(location, record, "chunk_sha256/c/0/0/0")
    if len(raw) != shape[0] * shape[1] * 32:
        raise StoreCorruptError(
            f"{where}: chunk_sha256 holds {len(raw)} bytes; its shape {shape} says "
            f"{shape[0] * shape[1] * 32}",
            [(f"{record.path}/chunk_sha256/c/0/0/0", "wrong size")],
        )
    table = np.frombuffer(raw, dtype=np.uint8).reshape(shape)
    return [bytes(row).hex() for row in table[names.index(array)]]


def pack_layout(record: PackRecord) -> Layout:
    """The pack's layout as its record gives it; a malformed one is a
    :class:`~ticktensor.errors.StoreCorruptError`."""
    try:
        return Layout.from_dict(dict(record.layout))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptError(
            f"pack {record.session}: layout {dict(record.layout)} is malformed"
        ) from exc


def check_pack_folder(location: Location, record: PackRecord) -> None:
    """The pack's folder must stay inside the store and hold no symlink (local stores)."""
    location.refuse_links(record.path, below=True, where=f"pack {record.session}")


def open_pack(
    location: Location, record: PackRecord, index: PackIndex, *, verify_chunks: bool = False
) -> zarr.Group:
    """The pack's Zarr group, read-only, behind the chunk guard.

    The pack must stay inside the store (no symlinks) and its arrays use the record's
    codec; each object zarr reads is checked against the record, and each inner chunk
    against the shard index and its decoded size (see :class:`GuardedPackStore`);
    ``verify_chunks`` checks every inner chunk's sha256 too.
    """
    where = f"pack {record.session} ({location.display(record.path)})"
    check_pack_folder(location, record)
    layout = pack_layout(record)
    names = HASHED if record.label_names else HASHED[:2]
    shards: dict[str, list[StoredChunk]] = {}
    limits = {}
    for name in names:
        chunk_map = pack_chunk_map(location, record, index, name)  # codecs checked there
        first = chunk_map.chunks[0]
        limits[name] = first.stored_rows * first.columns * (8 if name == "ts" else 4)
        for chunk in chunk_map.chunks:
            shards.setdefault(chunk.rel.removeprefix(f"{record.path}/"), []).append(chunk)
    guarded = GuardedPackStore(
        location.zarr_store(record.path, read_only=True),
        shards=shards,
        slots=dict.fromkeys(names, index.shard_rows // index.chunk_rows),
        files=record.files,
        codec=layout.chunk_codec,
        limits=limits,
        where=f"pack {record.session}",
        verify_chunks=verify_chunks,
    )
    try:
        return zarr.open_group(guarded, mode="r")
    except StoreCorruptError:
        raise
    except Exception as exc:  # zarr's metadata parser: JSON, type and validation errors
        raise StoreCorruptError(f"{where}: Zarr metadata is malformed ({exc!r:.300})") from exc
