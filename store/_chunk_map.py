"""Where an array's chunks are stored: the map a reader follows from rows to byte ranges.

One answer for both kinds of feature storage: a segment's array is one file per chunk;
a pack's array is a few shards, each holding many inner chunks as byte ranges
(:mod:`._packs`). Readers (the loaders) get :class:`StoredChunk` records and never parse
Zarr metadata or codec frames themselves.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ticktensor.errors import StoreCorruptError

from ._location import Location
from ._manifest import ZARR_JSON_BYTES, SegmentRecord

__all__ = [
    "CRC_ATTRIBUTE",
    "ChunkMap",
    "StoredChunk",
    "codec_of",
    "recorded_crcs",
    "segment_chunk_map",
]

_LITTLE_ENDIAN: Final = sys.byteorder == "little"
#: The attribute of an array's ``zarr.json`` listing the CRC-32C of each of its chunks'
#: stored bytes, in chunk order (segments and packs alike).
CRC_ATTRIBUTE: Final = "chunk_crc32c"


@dataclass(frozen=True)
class StoredChunk:
    """Where one chunk of an array is stored, and which of the array's rows it holds.

    ``rel`` is the object (relative to the store root), ``offset``/``nbytes`` the byte
    range in it: a segment's chunk is a whole file (``offset`` 0; ``nbytes`` ``None``
    when the record lists no size for it), a pack's a range of a shard. The chunk
    decodes to ``stored_rows x columns`` items (the last chunk of
    an array is padded with the fill value), of which ``rows``, from array row
    ``row_start``, belong to the array. ``codec`` is ``raw``, ``zstd`` or ``blosc``
    (decoded here), ``fill`` (never written: all fill value) or ``zarr`` (codecs only
    zarr-python reads); ``sha256`` hashes the stored bytes when it is recorded, and
    ``crc32c`` is their CRC-32C when the store records one (the array's attribute
    ``chunk_crc32c``): the cheap check every read makes.
    """

    rel: str
    offset: int
    nbytes: int | None
    index: int
    row_start: int
    rows: int
    stored_rows: int
    columns: int
    codec: str
    sha256: str | None
    crc32c: int | None = None


@dataclass(frozen=True)
class ChunkMap:
    """The stored chunks of one array, in row order: the answer to "which byte ranges of
    which objects hold rows ``a:b``" (:meth:`covering`)."""

    array: str
    rows: int
    chunk_rows: int
    chunks: tuple[StoredChunk, ...]

    def covering(self, lo: int, hi: int) -> tuple[StoredChunk, ...]:
        """The chunks holding rows ``lo:hi`` of the array (each a byte range)."""
        if not 0 <= lo <= hi <= self.rows:
            raise IndexError(f"rows {lo}:{hi} outside the array's {self.rows} rows")
        if lo == hi:
            return ()
        return self.chunks[lo // self.chunk_rows : (hi - 1) // self.chunk_rows + 1]


def codec_of(meta: dict[str, Any]) -> str:
    """How a chunk of the float32/int64 array ``meta`` describes is decoded by readers
    here: ``raw``, ``zstd`` or ``blosc``; ``zarr`` hands it to zarr-python."""
    codecs = meta.get("codecs", [])
    names = [c.get("name") for c in codecs]
    key = meta.get("chunk_key_encoding", {}).get("name")
    little = bool(codecs) and codecs[0].get("configuration", {}).get("endian") == "little"
    if meta.get("data_type") not in ("float32", "int64") or key != "default":
        return "zarr"
    if not (little and _LITTLE_ENDIAN):
        return "zarr"
    if names == ["bytes"]:
        return "raw"
    if names in (["bytes", "zstd"], ["bytes", "blosc"]):
        return str(names[1])
    return "zarr"


def segment_chunk_map(location: Location, record: SegmentRecord, array: str) -> ChunkMap:
    """The chunk files of one of a segment's arrays, from its Zarr metadata.

    Zarr writes no chunk that holds only the fill value (NaN): the record, which lists
    every file written, tells such a chunk (codec ``fill``) from a lost one. Records of
    old manifests list none.
    """
    rel = f"{record.path}/{array}"
    location.refuse_links(rel)  # a symlinked segment must not lead out of the store
    try:
        meta = json.loads(location.read_bytes(f"{rel}/zarr.json", limit=ZARR_JSON_BYTES))
        shape = [int(n) for n in meta["shape"]]
        chunk_rows = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise StoreCorruptError(
            f"{location.display(rel + '/zarr.json')}: unreadable array metadata ({exc})"
        ) from exc
    if shape[0] != record.rows or len(shape) > 2 or chunk_rows < 1:
        raise StoreCorruptError(
            f"{location.display(rel)}: array of shape {shape} in chunks of {chunk_rows} rows, "
            f"manifest says {record.rows} rows"
        )
    codec = codec_of(meta)
    separator = meta.get("chunk_key_encoding", {}).get("configuration", {}).get("separator", "/")
    fill = codec != "zarr" and bool(record.files) and _is_nan(meta.get("fill_value"))
    crcs = recorded_crcs(meta, -(-record.rows // chunk_rows), f"{location.display(rel)}/zarr.json")
    suffix = f"{separator}0" if len(shape) == 2 else ""
    columns = shape[1] if len(shape) == 2 else 1
    chunks = []
    for k in range(-(-record.rows // chunk_rows)):
        name = f"{array}/c{separator}{k}{suffix}"
        entry = record.files.get(name)
        chunks.append(
            StoredChunk(
                rel=f"{record.path}/{name}",
                offset=0,
                nbytes=None if entry is None else entry.bytes,
                index=k,
                row_start=k * chunk_rows,
                rows=min(chunk_rows, record.rows - k * chunk_rows),
                stored_rows=chunk_rows,
                columns=columns,
                codec="fill" if fill and entry is None else codec,
                sha256=None if entry is None else entry.sha256,
                crc32c=crcs[k],
            )
        )
    return ChunkMap(array, record.rows, chunk_rows, tuple(chunks))


def recorded_crcs(
    meta: dict[str, Any], chunks: int, where: str, *, required: bool = False
) -> list[int | None]:
    """The CRC-32C of each of the array's ``chunks`` chunks that the attribute
    ``chunk_crc32c`` of its metadata ``meta`` records (``None`` for a chunk not written,
    and for every chunk of arrays written before CRC-32C were recorded).

    With ``required`` (a pack whose group says it records them) the attribute must be
    there with a CRC-32C for every chunk. A malformed list is a ``StoreCorruptError``
    naming ``where`` (the ``zarr.json``).
    """
    attributes = meta.get("attributes")
    crcs = attributes.get(CRC_ATTRIBUTE) if isinstance(attributes, dict) else None
    if crcs is None and not required:
        return [None] * chunks
    if (
        not isinstance(crcs, list)
        or len(crcs) != chunks
        or not all(
            (c is None and not required) or (type(c) is int and 0 <= c < 1 << 32) for c in crcs
        )
    ):
        expected = "" if required else " (or null)"
        raise StoreCorruptError(
            f"{where}: attribute {CRC_ATTRIBUTE} is {crcs!r:.80}, expected one "
            f"CRC-32C{expected} for each of the {chunks} chunks"
        )
    recorded: list[int | None] = crcs
    return recorded


def _is_nan(fill_value: Any) -> bool:
    return fill_value == "NaN" or (isinstance(fill_value, float) and bool(np.isnan(fill_value)))
