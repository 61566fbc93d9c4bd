"""The chunk guard: what a reader accepts from storage before zarr decodes it.

Every file of a segment is listed in its manifest record with a size and a sha256.
:class:`GuardedStore` wraps the zarr store a segment is read through and checks each
file zarr asks for: a listed file must exist with its recorded size (a missing chunk
would otherwise read silently as fill values), an unlisted one must not exist, metadata
(``zarr.json``) must match its hash, and a compressed chunk must not declare more
decoded bytes than a chunk of the segment holds (no decompression bombs), and a chunk
must match the CRC-32C its array records (segments written before CRC-32C were recorded:
checked only with ``verify_chunks``). With ``verify_chunks`` every chunk is hashed
instead. Failures raise
:class:`~ticktensor.errors.StoreCorruptError` naming the segment and the chunk.

A pack's arrays are sharded: one object holds many inner chunks, which zarr reads as
byte ranges (or, for a whole shard, as one read). :class:`GuardedPackStore` applies the
same checks to each inner chunk: a range zarr asks for must be a chunk the shard index
lists (as read and bounded by the pack's chunk map), its frame must not decode to more
than a chunk holds, and its CRC-32C must be the recorded one (its sha256, with
``verify_chunks``; packs written without CRC-32C are checked only with it).

Readers that decode chunks themselves (the loaders) use :func:`decode_chunk`, which
applies the same frame check (each codec's :meth:`~.codecs.ChunkCodec.frame_problem`)
before it decodes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Self

from zarr.abc.store import ByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from ticktensor.errors import StoreCorruptError
from ticktensor.kernels import crc32c

from ._chunk_map import StoredChunk
from ._manifest import FileEntry, sha256_hex
from .codecs import ChunkCodec

__all__ = ["GuardedPackStore", "GuardedStore", "decode_chunk"]


class GuardedStore(WrapperStore[Any]):
    """A read-only zarr store that checks each file against a segment's manifest record.

    ``limits`` maps an array name (``ts``, ``values``, ``labels``) to the decoded size
    of one of its chunks, whose frames ``codec`` checks (:meth:`ChunkCodec.frame_problem`);
    ``where`` names the segment in messages. ``crcs`` maps a chunk
    file's key to its recorded CRC-32C: the reader fills it once zarr has read the
    arrays' metadata through this guard (the guard's views share it).
    """

    def __init__(
        self,
        store: Any,
        *,
        files: Mapping[str, FileEntry] | None = None,
        codec: ChunkCodec | None = None,
        limits: Mapping[str, int] | None = None,
        where: str = "segment",
        verify_chunks: bool = False,
        crcs: dict[str, int] | None = None,
    ) -> None:
        super().__init__(store)
        self._files = dict(files or {})
        self._codec = codec
        self._limits = dict(limits or {})
        self._where = where
        self._verify = verify_chunks
        self._crcs = {} if crcs is None else crcs  # not copied: filled after opening

    def _with_store(self, store: Any) -> Self:
        """This guard, with every check it makes, around another store (zarr asks for
        one per read-only or context-managed view)."""
        clone = copy.copy(self)
        clone._store = store
        return clone

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        try:
            buf = await super().get(key, prototype, byte_range)
        except OSError as exc:  # an I/O error names the chunk it hit
            raise StoreCorruptError(
                f"{self._where} chunk {key}: cannot read ({exc})", [(key, str(exc))]
            ) from exc
        if byte_range is None:
            self.check(key, None if buf is None else buf.to_bytes())
        return buf

    def check(self, key: str, data: bytes | None) -> None:
        """Raise ``StoreCorruptError`` when ``data`` (``None``: absent) is not what is recorded."""
        entry = self._files.get(key)
        why = None
        if entry is None:
            if data is not None and self._files:
                why = "file is not listed in the manifest"
        elif data is None:
            why = "file is missing"
        elif len(data) != entry.bytes:
            why = f"{len(data):,} bytes stored, the manifest records {entry.bytes:,}"
        elif (key.endswith("zarr.json") or self._verify) and sha256_hex(data) != entry.sha256:
            why = f"content hash mismatch (manifest sha256 {entry.sha256[:16]}...)"
        elif not key.endswith("zarr.json"):
            limit = self._limits.get(key.split("/", 1)[0])
            if limit is not None and self._codec is not None:
                why = self._codec.frame_problem(data, limit)
            crc = self._crcs.get(key)
            if why is None and not self._verify and crc is not None:
                found = crc32c(data)
                if found != crc:
                    why = f"crc32c {found:08x} != {crc:08x} recorded when the chunk was written"
        if why is not None:
            raise StoreCorruptError(f"{self._where} chunk {key}: {why}", [(key, why)])


class GuardedPackStore(GuardedStore):
    """A :class:`GuardedStore` for a pack, whose shards hold many chunks each.

    ``shards`` maps each shard's key (``values/c/0/0``) to its inner chunks, as the
    pack's chunk map found them in the shard index, and ``slots`` each array to the
    chunk slots of one shard (entries of its index); ``limits`` maps an array name to
    the decoded size of one inner chunk.
    """

    def __init__(
        self,
        store: Any,
        *,
        shards: Mapping[str, Sequence[StoredChunk]],
        slots: Mapping[str, int],
        files: Mapping[str, FileEntry] | None = None,
        codec: ChunkCodec | None = None,
        limits: Mapping[str, int] | None = None,
        where: str = "pack",
        verify_chunks: bool = False,
    ) -> None:
        super().__init__(
            store, files=files, codec=codec, limits=limits, where=where, verify_chunks=verify_chunks
        )
        self._shards = {key: tuple(chunks) for key, chunks in shards.items()}
        self._at = {key: {c.offset: c for c in chunks} for key, chunks in shards.items()}
        self._slots = dict(slots)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        buf = await super().get(key, prototype, byte_range)  # a whole shard: check() below
        at = self._at.get(key)
        if byte_range is None or at is None:
            return buf
        if buf is None:
            raise self._error(key, "file is missing")
        if isinstance(byte_range, SuffixByteRequest):
            # The shard index: the chunk map read these bytes and bounded every entry.
            if byte_range.suffix != 16 * self._slots.get(key.split("/", 1)[0], -1):
                raise self._error(key, f"read of the last {byte_range.suffix} bytes")
            return buf
        chunk = at.get(byte_range.start) if isinstance(byte_range, RangeByteRequest) else None
        if (
            chunk is None
            or chunk.nbytes is None
            or not isinstance(byte_range, RangeByteRequest)
            or byte_range.end != chunk.offset + chunk.nbytes
        ):
            raise self._error(key, f"{byte_range} is no chunk the shard index lists")
        self.check_chunk(key, chunk, buf.to_bytes())
        return buf

    def check(self, key: str, data: bytes | None) -> None:
        chunks = self._shards.get(key)
        if chunks is None or data is None:
            super().check(key, data)
            return
        entry = self._files.get(key)
        if entry is not None and len(data) != entry.bytes:
            why = f"{len(data):,} bytes stored, the manifest records {entry.bytes:,}"
            raise self._error(key, why)
        for chunk in chunks:
            if chunk.nbytes is not None:
                self.check_chunk(key, chunk, data[chunk.offset : chunk.offset + chunk.nbytes])
        if self._verify and entry is not None and sha256_hex(data) != entry.sha256:
            why = f"content hash mismatch outside its chunks (recorded {entry.sha256[:16]}...)"
            raise self._error(key, why)

    def check_chunk(self, key: str, chunk: StoredChunk, data: bytes) -> None:
        """Raise ``StoreCorruptError`` naming the inner chunk when ``data`` is not it."""
        why = None
        if len(data) != chunk.nbytes:
            why = f"{len(data):,} bytes read, the shard index says {chunk.nbytes:,}"
        elif self._verify and chunk.sha256 is not None and sha256_hex(data) != chunk.sha256:
            why = f"content hash mismatch (recorded sha256 {chunk.sha256[:16]}...)"
        else:
            limit = self._limits.get(key.split("/", 1)[0])
            if limit is not None and self._codec is not None:  # stored full-size
                why = self._codec.frame_problem(data, limit, exact=True)
        if why is None and not self._verify and chunk.crc32c is not None:
            found = crc32c(data)
            if found != chunk.crc32c:
                why = (
                    f"crc32c {found:08x} != {chunk.crc32c:08x} recorded when the chunk was written"
                )
        if why is not None:
            array = key.split("/", 1)[0]
            raise StoreCorruptError(
                f"{self._where} {array} chunk {chunk.index} "
                f"(bytes {chunk.offset}+{chunk.nbytes} of {chunk.rel}): {why}",
                [(key, why)],
            )

    def _error(self, key: str, why: str) -> StoreCorruptError:
        return StoreCorruptError(f"{self._where} shard {key}: {why}", [(key, why)])


def decode_chunk(chunk: StoredChunk, stored: Any, out: Any, decoded_bytes: int, where: str) -> None:
    """Decode ``stored`` (the chunk's stored bytes: ``bytes`` or a byte view) into ``out``
    (a writable buffer of exactly ``decoded_bytes``, the chunk's decoded size) with the
    chunk's codec.

    The frame must declare exactly that size before anything is decoded (no
    decompression bombs, no stale bytes left in a reused buffer; a raw chunk must be that
    size); any failure is a :class:`~ticktensor.errors.StoreCorruptError` naming
    ``where`` and the chunk.
    """
    codec = chunk.codec
    if codec is None:
        raise ValueError(f"decode_chunk: {where} is stored with codecs zarr-python reads")
    why = codec.frame_problem(stored, decoded_bytes, exact=True)
    if why is None:
        try:
            codec.decode_into(stored, out)
            return
        except (RuntimeError, ValueError, TypeError) as exc:
            why = str(exc)
    if codec.stores_decoded:
        raise StoreCorruptError(
            f"{where}: raw chunk of {len(stored)} bytes, expected {decoded_bytes}",
            [(chunk.rel, "wrong size")],
        )
    raise StoreCorruptError(
        f"{where}: cannot decode this {codec.tag} chunk: {why}",
        [(chunk.rel, f"undecodable {codec.tag} chunk")],
    )
