"""Writing a pack: a session's rows appended a block of symbols at a time, stored at the end.

A session's features are computed a block of symbols at a time. :class:`PackWriter`
takes each block as it comes: it cuts the rows into inner chunks, encodes them and
hashes them (each chunk's stored bytes, the running hash of the shard object it goes
to, and the chunk's raw bytes for the content hash), so that once the last block has
come only the small objects are left to hash and the objects to put in place. Nothing
appears at the pack's path before :meth:`PackWriter.finish`: the folder is named by the
content hash, which needs every row (on a local store the shards of a large pack grow in
a working folder meanwhile, then move in). ``Store.write_pack`` is the same writer given
every row at once.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any, Final

import numpy as np
import numpy.typing as npt

from ticktensor.errors import SchemaError
from ticktensor.kernels import crc32c

from ._chunk_map import CRC_ATTRIBUTE
from ._layout import Codec, Layout
from ._location import Location, safe_component, start_writeback
from ._manifest import FileEntry, PackRecord, SourceFile, sha256_hex
from ._packs import (
    PACK_FORMAT_VERSION,
    Floats,
    Int64s,
    check_pack_inputs,
    chunks_per_shard,
    content_hash_of_chunks,
    pack_path,
    shard_rows_for,
)
from ._zarr_write import (
    Buffer,
    array_files,
    chunk_codec,
    group_file,
    padded_chunk,
    shard_index,
    shard_key,
    sharding_document,
)

__all__ = ["PackWriter"]

_DIMENSIONS: Final = {"ts": ["time"], "values": ["time", "feature"], "labels": ["time", "label"]}
#: Chunks a pack writer lets its pool encode and hash ahead of the one it stores.
_AHEAD: Final = 4
#: Stored bytes of chunks a pack writer on a local store holds in memory; past them it
#: writes every chunk to a working folder as it comes. A smaller pack (a partition of
#: daily bars, a few thousand rows) goes straight into its folder at the end: a working
#: folder to make, move out of and remove costs more than writing such a pack.
SPILL_BYTES: Final = 8 << 20


class _Chunks:
    """One array of a pack cut into inner chunks of ``chunk_rows`` rows as its rows come.

    Each full chunk is encoded and hashed when its last row comes, on ``pool`` (a few
    chunks ahead; without one, on this thread): its stored bytes (``digests``, and their
    CRC-32C in ``crcs``) and its raw little-endian bytes (``raw_digests``, for the content
    hash; the same hash when the codec stores raw bytes). This thread takes the chunks
    in order to update the running hash of their shard's object (``per_shard`` chunks
    each) and holds them (``held``, ``held_bytes``) until :meth:`spill_to` gives a
    ``spill(shard, data)`` that takes the held ones and every later one. Rows short of a
    chunk wait for the next block.
    """

    def __init__(
        self,
        dtype: np.dtype[Any],
        chunk_rows: int,
        per_shard: int,
        layout: Layout,
        pool: ThreadPoolExecutor | None,
    ) -> None:
        self.dtype = dtype
        self.chunk_rows = chunk_rows
        self.per_shard = per_shard
        self.encode = chunk_codec(layout, dtype.itemsize)
        self.raw_is_stored = layout.chunk_codec.stores_decoded
        self.pool = pool
        self.spill: Callable[[int, Buffer], None] | None = None
        self.held: list[Buffer] = []
        self.held_bytes = 0
        self.sizes: list[int] = []
        self.digests: list[bytes] = []
        self.raw_digests: list[bytes] = []
        self.crcs: list[int] = []
        self.shards: list[Any] = []  # hashlib's sha256 of each shard's object so far
        self._encoding: collections.deque[Future[tuple[Buffer, bytes, bytes, int]]] = (
            collections.deque()
        )
        self._waiting: list[npt.NDArray[Any]] = []
        self._waiting_rows = 0

    def append(self, data: npt.NDArray[Any]) -> None:
        """Take ``data``'s rows (held as views until stored: ``data`` must not change)."""
        data = np.ascontiguousarray(data).astype(self.dtype.newbyteorder("<"), copy=False)
        lo = 0
        if self._waiting_rows:
            lo = min(self.chunk_rows - self._waiting_rows, data.shape[0])
            self._wait(data[:lo])
            if self._waiting_rows == self.chunk_rows:
                self._add(self._take_waiting())
        while data.shape[0] - lo >= self.chunk_rows:
            self._add(data[lo : lo + self.chunk_rows])
            lo += self.chunk_rows
        if lo < data.shape[0]:
            self._wait(data[lo:])

    def finish(self, chunk_rows: int) -> None:
        """Store the waiting rows as the last chunk of ``chunk_rows`` rows (padded with
        the fill value, as Zarr stores a partial chunk), and every chunk still encoding."""
        if self._waiting_rows:
            self._add(padded_chunk(self._take_waiting(), chunk_rows))
        self._take(0)

    def spill_to(self, spill: Callable[[int, Buffer], None]) -> None:
        """Hand the held chunks, and from now on every chunk stored, to ``spill``."""
        for number, stored in enumerate(self.held):
            spill(number // self.per_shard, stored)
        self.held, self.held_bytes, self.spill = [], 0, spill

    def _wait(self, rows: npt.NDArray[Any]) -> None:
        self._waiting.append(rows)
        self._waiting_rows += rows.shape[0]

    def _take_waiting(self) -> npt.NDArray[Any]:
        rows = self._waiting[0] if len(self._waiting) == 1 else np.concatenate(self._waiting)
        self._waiting, self._waiting_rows = [], 0
        return rows

    def _add(self, chunk: npt.NDArray[Any]) -> None:
        if self.pool is None:
            self._store(*self._encoded(chunk))
            return
        self._encoding.append(self.pool.submit(self._encoded, chunk))
        self._take(_AHEAD)

    def _encoded(self, chunk: npt.NDArray[Any]) -> tuple[Buffer, bytes, bytes, int]:
        """The chunk's stored bytes, their sha256, the sha256 of its raw bytes, and the
        CRC-32C of its stored bytes."""
        stored = self.encode(chunk)
        digest = hashlib.sha256(stored).digest()
        raw = digest if self.raw_is_stored else hashlib.sha256(chunk.data.cast("B")).digest()
        return stored, digest, raw, crc32c(stored)

    def _take(self, ahead: int) -> None:
        """Store the encoded chunks in order, but the last ``ahead`` (still encoding)."""
        while len(self._encoding) > ahead:
            self._store(*self._encoding.popleft().result())

    def _store(self, stored: Buffer, digest: bytes, raw: bytes, crc: int) -> None:
        """The next chunk, encoded: into its shard's running hash, then spilled or held."""
        shard = len(self.sizes) // self.per_shard
        if shard == len(self.shards):
            self.shards.append(hashlib.sha256())
        self.shards[shard].update(stored)
        if self.spill is None:
            self.held.append(stored)
            self.held_bytes += len(stored)
        else:
            self.spill(shard, stored)
        self.sizes.append(len(stored))
        self.digests.append(digest)
        self.raw_digests.append(raw)
        self.crcs.append(crc)


class _Spill:
    """The shard objects of a pack being written, as files of a working folder of a local
    store that each chunk is written to as it comes, so that a block's rows need not
    stay in memory until the pack is finished.

    :meth:`move` moves a finished object into the pack's folder; :meth:`discard`
    removes the working folder (``verify --repair`` removes one a killed writer left:
    no version refers to it).
    """

    def __init__(self, location: Location, session: str) -> None:
        self.location = location
        self.folder = f"packs/{safe_component(session)}.writing-{uuid.uuid4().hex[:12]}"
        self._files: dict[tuple[str, int], IO[bytes]] = {}

    def writer(self, array: str) -> Callable[[int, Buffer], None]:
        """What writes ``array``'s stored chunks, shard by shard."""

        def write(shard: int, data: Buffer) -> None:
            rel = self._rel(array, shard)
            with self.location.writing(rel):
                f = self._files.get((array, shard))
                if f is None:
                    path = self.location.create_local(rel)  # following no link
                    f = self._files[array, shard] = open(path, "wb")  # noqa: SIM115 (by move)
                f.write(data)

        return write

    def start_writeback(self) -> None:
        """Start writing the shards' new bytes back (once per block: a hint per chunk
        cost a system call each), so that the commit's flush has less to wait for."""
        for (array, shard), f in self._files.items():
            with self.location.writing(self._rel(array, shard)):  # errors name the file
                f.flush()
            start_writeback(f.fileno())

    def move(
        self, array: str, shard: int, index: bytes, rel: str, digest: str, existed: bool
    ) -> int:
        """End the shard's object with its ``index`` and move it to ``rel``; its size."""
        f = self._files.pop((array, shard))
        with self.location.writing(self._rel(array, shard)), f:
            f.write(index)
            size = f.tell()
        self.location.move_content_addressed(self._rel(array, shard), rel, digest, exists=existed)
        return size

    def discard(self) -> None:
        for f in self._files.values():
            with contextlib.suppress(OSError):  # a failed write (a full disk) is dropped
                f.close()
        self._files.clear()
        self.location.remove_tree(self.folder)

    def _rel(self, array: str, shard: int) -> str:
        return f"{self.folder}/{array}/{shard}"


class PackWriter:
    """One session's pack, its rows appended a block of symbols at a time.

    Blocks come in symbol order: each block's symbols sorted, distinct and after the
    previous block's, each with rows (``offsets`` from 0, as ``Store.write_pack`` takes
    them). :meth:`finish` writes the pack and returns its record; :meth:`close` drops a
    writer that will not finish. ``threads`` encode and hash the chunks beside the
    appending thread (0: that thread does). On a local store, once the pack holds more
    than :data:`SPILL_BYTES`, each chunk is written to a working folder as it comes (moved
    into the pack's folder by :meth:`finish`); a smaller pack's chunks, and those of a
    pack on an object store, are held in memory until then. The arrays appended must not
    change until the pack is finished (uncompressed chunks are views of them).
    """

    def __init__(
        self,
        location: Location,
        *,
        session: str,
        feature_names: Sequence[str],
        label_names: Sequence[str],
        layout: Layout,
        published: Callable[[str], PackRecord | None] | None = None,
        threads: int = 2,
    ) -> None:
        self._location = location
        self.session = session
        self.feature_names = tuple(feature_names)
        self.label_names = tuple(label_names)
        self.layout = layout
        self._published = published
        self.symbols: list[str] = []
        self._counts: list[int] = []
        self.rows = 0
        self._ts_range = (np.iinfo(np.int64).max, np.iinfo(np.int64).min)
        # A pack of fewer rows than a chunk is one chunk of its rows: until the rows
        # reach a chunk, the chunk size stays the layout's and no chunk is complete.
        per_shard = chunks_per_shard(len(self.feature_names), layout.chunk_rows)
        dtypes: dict[str, np.dtype[Any]] = {
            "ts": np.dtype(np.int64),
            "values": np.dtype(np.float32),
        }
        if self.label_names:
            dtypes["labels"] = np.dtype(np.float32)
        self._spill: _Spill | None = None  # made once the pack holds SPILL_BYTES
        self._finished = False
        # Encoding and hashing release the GIL: threads beside the one appending.
        self._pool = ThreadPoolExecutor(threads, "ticktensor-pack") if threads else None
        self._arrays = {
            name: _Chunks(
                dtype,
                layout.chunk_rows,
                per_shard,
                layout,
                self._pool,
            )
            for name, dtype in dtypes.items()
        }

    def append(
        self,
        symbols: Sequence[str],
        offsets: npt.ArrayLike,
        ts: Int64s,
        values: Floats,
        labels: Floats | None = None,
    ) -> None:
        """Add a block: ``symbols`` (sorted, after the previous block's), symbol ``i``
        holding rows ``offsets[i]:offsets[i+1]`` of ``ts``, ``values`` and ``labels``."""
        if self._finished:
            raise SchemaError(f"pack {self.session}: the writer is finished or closed")
        offsets = np.asarray(offsets, dtype=np.int64)
        check_pack_inputs(
            self.session,
            symbols,
            offsets,
            ts,
            values,
            labels,
            self.feature_names,
            self.label_names,
        )
        if self.symbols and symbols[0] <= self.symbols[-1]:
            raise SchemaError(
                f"pack {self.session}: a block's symbols must follow the previous block's, "
                f"got {symbols[0]!r} after {self.symbols[-1]!r}"
            )
        self.symbols += symbols
        self._counts += np.diff(offsets).tolist()
        self.rows += int(ts.shape[0])
        self._ts_range = (
            min(self._ts_range[0], int(ts.min())),
            max(self._ts_range[1], int(ts.max())),
        )
        for name, data in zip(self._arrays, (ts, values, labels), strict=False):
            assert data is not None  # check_pack_inputs: labels with label names
            self._arrays[name].append(data)
        held = sum(chunks.held_bytes for chunks in self._arrays.values())
        if self._spill is None and self._location.is_local and held > SPILL_BYTES:
            self._spill = _Spill(self._location, self.session)
            for name, chunks in self._arrays.items():
                chunks.spill_to(self._spill.writer(name))
        if self._spill is not None:
            self._spill.start_writeback()

    def finish(self, sources: Sequence[SourceFile] = ()) -> PackRecord:
        """Write the pack (nothing when the latest version holds it) and return its record.

        A folder already at the pack's path (an older version's pack of the same content,
        or an interrupted write's leftover) is never removed: files with these bytes are
        kept, missing ones written, and a file with other bytes is an error (see
        :meth:`Location.write_content_addressed`).
        """
        if not self.rows:
            raise SchemaError(f"pack {self.session}: needs at least one row, got 0")
        if self._finished:
            raise SchemaError(f"pack {self.session}: the writer is finished or closed")
        try:
            return self._finish(sources)
        finally:
            self.close()

    def close(self) -> None:
        """Drop what was stored of a pack that is not finished (nothing once it is)."""
        self._finished = True
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        if self._spill is not None:
            self._spill.discard()

    def _finish(self, sources: Sequence[SourceFile]) -> PackRecord:
        chunk_rows = min(self.layout.chunk_rows, self.rows)
        shard_rows = shard_rows_for(self.rows, len(self.feature_names), chunk_rows)
        for chunks in self._arrays.values():
            chunks.finish(chunk_rows)
        offsets = np.concatenate([[0], np.cumsum(self._counts)]).astype(np.int64)
        content_hash = content_hash_of_chunks(
            self.session,
            self.symbols,
            offsets,
            self.rows,
            [chunks.raw_digests for chunks in self._arrays.values()],
            self.feature_names,
            self.label_names,
            self.layout,
        )
        rel = pack_path(self.session, content_hash)
        found = None if self._published is None else self._published(rel)
        if found is not None:
            return found
        files = self._write(rel, chunk_rows, shard_rows, offsets, content_hash)
        return PackRecord(
            session=self.session,
            path=rel,
            rows=self.rows,
            symbols=len(self.symbols),
            ts_start=self._ts_range[0],
            ts_end=self._ts_range[1],
            layout=self.layout.to_dict(),
            content_hash=content_hash,
            files=files,
            feature_names=self.feature_names,
            label_names=self.label_names,
            sources=tuple(sources),
        )

    def _write(
        self, rel: str, chunk_rows: int, shard_rows: int, offsets: Int64s, content_hash: str
    ) -> dict[str, FileEntry]:
        """Write every object of the pack below ``rel``; their entries by key."""
        existed = self._location.exists(rel)  # an older version's, or an interrupted write's
        files: dict[str, FileEntry] = {}

        def put(key: str, parts: Sequence[Buffer], digest: str | None = None) -> None:
            digest = digest or sha256_hex(b"".join(parts))
            if existed:
                self._location.write_content_addressed(f"{rel}/{key}", parts, digest, exists=True)
            else:
                # Not flushed now: the commit flushes every file it publishes.
                self._location.write_atomic(f"{rel}/{key}", parts, durable=False)
            files[key] = FileEntry(digest, sum(len(p) for p in parts))

        per_shard = shard_rows // chunk_rows
        for name, chunks in self._arrays.items():
            shape = (self.rows, *self._columns(name))
            put(f"{name}/zarr.json", [self._document(name, shape, chunk_rows, shard_rows)])
            for shard, first in enumerate(range(0, len(chunks.sizes), per_shard)):
                key = f"{name}/{shard_key(shard, len(shape))}"
                index = shard_index(chunks.sizes[first : first + per_shard], per_shard)
                running = chunks.shards[shard].copy()
                running.update(index)  # the shard's index, after its chunks
                digest = running.hexdigest()
                if self._spill is not None:
                    size = self._spill.move(name, shard, index, f"{rel}/{key}", digest, existed)
                    files[key] = FileEntry(digest, size)
                else:
                    put(key, [*chunks.held[first : first + per_shard], index], digest)
        digests = b"".join(d for chunks in self._arrays.values() for d in chunks.digests)
        hashes = np.frombuffer(digests, dtype=np.uint8).reshape(len(self._arrays), -1, 32)
        for key, blob in array_files(
            hashes,
            len(self._arrays),
            Layout(codec=Codec.NONE),
            dimension_names=["array", "chunk", "byte"],
            attributes={"arrays": list(self._arrays)},
        ):
            put(f"chunk_sha256/{key}", [blob])
        attrs = {
            "ticktensor": {
                "kind": "pack",
                "format_version": PACK_FORMAT_VERSION,
                # Each array's zarr.json lists the CRC-32C of its inner chunks in this
                # attribute (readers without it ignore both).
                "chunk_checksum": CRC_ATTRIBUTE,
                "session": self.session,
                "feature_names": list(self.feature_names),
                "label_names": list(self.label_names),
                "content_hash": content_hash,
                "chunk_rows": chunk_rows,
                "shard_rows": shard_rows,
                "symbols": list(self.symbols),
                "offsets": offsets.tolist(),
            }
        }
        put("zarr.json", [group_file(attrs)])
        return files

    def _columns(self, name: str) -> tuple[int, ...]:
        return {"ts": (), "values": (len(self.feature_names),), "labels": (len(self.label_names),)}[
            name
        ]

    def _document(
        self, name: str, shape: tuple[int, ...], chunk_rows: int, shard_rows: int
    ) -> bytes:
        names = {
            "values": {"feature_names": list(self.feature_names)},
            "labels": {"label_names": list(self.label_names)},
        }.get(name, {})
        # The CRC-32C of every inner chunk's stored bytes, in chunk order: no object of
        # its own, and covered by the hash the record keeps of this zarr.json.
        attributes = {**names, CRC_ATTRIBUTE: self._arrays[name].crcs}
        return sharding_document(
            shape,
            self._arrays[name].dtype,
            chunk_rows,
            shard_rows,
            self.layout,
            dimension_names=_DIMENSIONS[name],
            attributes=attributes,
        )
