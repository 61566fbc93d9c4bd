"""Where an array's chunks are stored: the map a reader follows from rows to byte ranges.

One answer for both kinds of feature storage: a segment's array is one file per chunk;
a pack's array is a few shards, each holding many inner chunks as byte ranges
(:mod:`._packs`). Readers (the loaders) get :class:`StoredChunk` records and never parse
Zarr metadata or codec frames themselves.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from ticktensor.errors import StoreCorruptError

from ._location import Location
from ._manifest import ZARR_JSON_BYTES, PackRecord, SegmentRecord
from .codecs import ChunkCodec, codec_of_chain

__all__ = [
    "CRC_ATTRIBUTE",
    "ChunkMap",
    "StoredChunk",
    "codec_of",
    "recorded_crcs",
    "segment_chunk_map",
]

#: The attribute of an array's ``zarr.json`` listing the CRC-32C of each of its chunks'
#: stored bytes, in chunk order (segments and packs alike).
CRC_ATTRIBUTE: Final = "chunk_crc32c"
#: Little-endian chunks decode in place on this machine (else zarr-python swaps bytes).
_LITTLE_ENDIAN: Final = sys.byteorder == "little"


@dataclass(frozen=True)
class StoredChunk:
    """Where one chunk of an array is stored, and which of the array's rows it holds.

    ``rel`` is the object (relative to the store root), ``offset``/``nbytes`` the byte
    range in it: a segment's chunk is a whole file (``offset`` 0; ``nbytes`` ``None``
    when the record lists no size for it), a pack's a range of a shard. The chunk
    decodes to ``stored_rows x columns`` items (the last chunk of
    an array is padded with the fill value), of which ``rows``, from array row
    ``row_start``, belong to the array. ``codec`` decodes the stored bytes (``None``:
    codecs only zarr-python reads); a chunk that was never ``written`` holds only the
    fill value (NaN), as Zarr writes no such chunk. ``sha256`` hashes the stored bytes
    when it is recorded, and ``crc32c`` is their CRC-32C when the store records one (the
    array's attribute ``chunk_crc32c``): the cheap check every read makes. ``array`` is
    the array's name, ``owner`` the segment or pack (``segment SYMBOL/SESSION``, ``pack
    SESSION``, for messages), ``whole_file`` whether the chunk is a file of its own; and
    ``record`` the store's record of the segment or pack, which only ``store/`` reads.
    """

    rel: str
    offset: int
    nbytes: int | None
    index: int
    row_start: int
    rows: int
    stored_rows: int
    columns: int
    codec: ChunkCodec | None
    sha256: str | None
    crc32c: int | None = None
    written: bool = True
    array: str = "values"
    owner: str = ""
    whole_file: bool = False
    record: SegmentRecord | PackRecord | None = field(default=None, repr=False, compare=False)

    @property
    def decoded_here(self) -> bool:
        """Whether :func:`~ticktensor.store.decode_chunk` decodes the chunk (else
        zarr-python reads its array)."""
        return self.codec is not None

    @property
    def stored_as_decoded(self) -> bool:
        """Whether the stored bytes are the decoded bytes (read straight into place)."""
        return self.codec is not None and self.codec.stores_decoded

    def check_stored_size(self, size: int, decoded: int, where: str) -> None:
        """Refuse stored bytes of ``size`` before they are read: more than any frame of
        the chunk's codec takes for ``decoded`` bytes is a
        :class:`~ticktensor.errors.StoreCorruptError` naming ``where`` (a file grown to
        gigabytes is never read into memory)."""
        if self.codec is not None and size > self.codec.max_stored(decoded):
            raise StoreCorruptError(
                f"{where}: {self.codec.tag} chunk of {size:,} bytes, more than any frame "
                f"of a {decoded:,}-byte chunk takes",
                [(self.rel, "wrong size")],
            )


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


def codec_of(meta: dict[str, Any]) -> ChunkCodec | None:
    """The codec that decodes the chunks of the float32/int64 array ``meta`` describes
    here; ``None`` hands them to zarr-python."""
    key = meta.get("chunk_key_encoding", {}).get("name")
    if meta.get("data_type") not in ("float32", "int64") or key != "default":
        return None
    if not _LITTLE_ENDIAN:
        return None
    return codec_of_chain(meta.get("codecs"))


def segment_chunk_map(location: Location, record: SegmentRecord, array: str) -> ChunkMap:
    """The chunk files of one of a segment's arrays, from its Zarr metadata.

    Zarr writes no chunk that holds only the fill value (NaN): the record, which lists
    every file written, tells such a chunk (not ``written``) from a lost one. Records of
    old manifests list none.
    """
    rel = f"{record.path}/{array}"
    location.refuse_links(rel)  # a symlinked segment must not lead out of the store
    try:
        meta = json.loads(location.read_bytes(f"{rel}/zarr.json", limit=ZARR_JSON_BYTES))
        shape = [int(n) for n in meta["shape"]]
        chunk_rows = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
    except (OSError, ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
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
    fill = codec is not None and bool(record.files) and _is_nan(meta.get("fill_value"))
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
                codec=codec,
                sha256=None if entry is None else entry.sha256,
                crc32c=crcs[k],
                written=not (fill and entry is None),
                array=array,
                owner=f"segment {record.symbol}/{record.session}",
                whole_file=True,
                record=record,
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
