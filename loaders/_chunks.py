"""Feature chunks of a window dataset: which stored rows each source reads, and loading them.

Where rows are stored is the store's answer (:meth:`StoreVersion.chunk_map`): a segment's
chunk is a whole file, a pack's a byte range of a shard. This module keeps the loader's
side of it: numbering the chunks source by source, reading a chunk's bytes (mapped on a
local disk, one request elsewhere), checking and decoding them, and applying the feature
subset and normalization.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, overload

import numpy as np
import numpy.typing as npt
import zarr

from ticktensor._memory import fresh_buffer
from ticktensor.errors import StoreCorruptError
from ticktensor.kernels import read_checked
from ticktensor.store import (
    PackRecord,
    SegmentRecord,
    StoredChunk,
    StoreVersion,
    check_chunk,
    decode_chunk,
)

__all__ = [
    "ChunkFile",
    "ChunkIndex",
    "ChunkLoader",
    "LoadTimes",
    "Record",
    "SourcePart",
    "Sources",
    "read_array",
]

Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]
Bytes = npt.NDArray[np.uint8]
Stored = bytes | Bytes
"""A chunk's stored bytes: read from fsspec, or read from a local file into a buffer."""
Record = SegmentRecord | PackRecord
"""What a source's rows are stored in: a segment (one symbol) or a pack (a session)."""

_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


def describe(record: Record) -> str:
    """``segment SYMBOL/SESSION`` or ``pack SESSION``, for messages."""
    if isinstance(record, SegmentRecord):
        return f"segment {record.symbol}/{record.session}"
    return f"pack {record.session}"


@dataclass(frozen=True)
class SourcePart:
    """Rows ``[lo, hi)`` of a segment or a pack, read by one source of a dataset.

    ``symbol`` is the one symbol those rows belong to, or ``None`` for a whole pack (the
    rows of every symbol it holds, sorted by symbol).
    """

    record: Record = field(repr=False)
    lo: int
    hi: int
    symbol: str | None

    @property
    def rows(self) -> int:
        return self.hi - self.lo


@dataclass(frozen=True)
class Sources:
    """A dataset's sources as columns: source ``s`` reads parts ``first[s]:first[s + 1]``
    laid end to end, part ``k`` being rows ``[lo[k], hi[k])`` of ``records[record[k]]``.

    ``symbol[s]`` is the source's one symbol (``None`` for a whole pack); ``phase[s]`` the
    rows of the symbol's series before its first part that were left unread (joined
    series only), so the stride grid does not depend on the time filter.
    """

    records: tuple[Record, ...]
    record: Int64s
    lo: Int64s
    hi: Int64s
    first: Int64s
    symbol: tuple[str | None, ...]
    phase: Int64s

    @classmethod
    def of(cls, sources: Sequence[Sequence[SourcePart]]) -> Sources:
        """The sources made of ``sources``' parts (phase 0)."""
        parts = [part for source in sources for part in source]
        counts = [len(source) for source in sources]
        return cls(
            tuple(part.record for part in parts),
            np.arange(len(parts), dtype=np.int64),
            np.asarray([part.lo for part in parts], dtype=np.int64),
            np.asarray([part.hi for part in parts], dtype=np.int64),
            np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            tuple(source[0].symbol for source in sources),
            np.zeros(len(sources), dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.symbol)

    @property
    def rows(self) -> Int64s:
        """Rows of each source."""
        ends = np.concatenate([[0], np.cumsum(self.hi - self.lo)]).astype(np.int64)
        rows: Int64s = ends[self.first[1:]] - ends[self.first[:-1]]
        return rows

    def part_offsets(self) -> Int64s:
        """Where each part's rows start within its source's rows."""
        ends = np.concatenate([[0], np.cumsum(self.hi - self.lo)]).astype(np.int64)
        base = np.repeat(ends[self.first[:-1]], np.diff(self.first))
        offsets: Int64s = ends[:-1] - base
        return offsets

    def distinct_records(self) -> tuple[list[Record], Int64s]:
        """The distinct records (by path) some part reads, and each part's number among them."""
        numbers: dict[str, int] = {}
        distinct: list[Record] = []
        of_record = np.zeros(len(self.records), dtype=np.int64)
        for r in np.unique(self.record).tolist():
            path = self.records[r].path
            if path not in numbers:
                numbers[path] = len(distinct)
                distinct.append(self.records[r])
            of_record[r] = numbers[path]
        of_part: Int64s = of_record[self.record]
        return distinct, of_part

    def parts(self, source: int) -> tuple[SourcePart, ...]:
        """Source ``source``'s parts, in order."""
        symbol = self.symbol[source]
        at = slice(int(self.first[source]), int(self.first[source + 1]))
        return tuple(
            SourcePart(self.records[r], lo, hi, symbol)
            for r, lo, hi in zip(
                self.record[at].tolist(), self.lo[at].tolist(), self.hi[at].tolist(), strict=True
            )
        )

    def take(self, kept: Int64s) -> Sources:
        """The sources ``kept``, in that order."""
        counts = np.diff(self.first)[kept]
        first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        parts = np.repeat(self.first[kept] - first[:-1], counts) + np.arange(
            int(first[-1]), dtype=np.int64
        )
        return Sources(
            self.records,
            self.record[parts],
            self.lo[parts],
            self.hi[parts],
            first,
            tuple(self.symbol[s] for s in kept.tolist()),
            self.phase[kept],
        )


@dataclass(frozen=True)
class ChunkFile:
    """One chunk of a source: rows ``[skip, skip + rows)`` of a stored chunk of an array.

    ``stored`` says where the bytes are (a segment's chunk file, or a byte range of a
    pack's shard) and how they decode, as the store's chunk map gives it; ``record`` is
    the segment or pack. A source whose rows start inside a stored chunk (a symbol's rows
    in a pack, joined across sessions) skips the chunk's first rows; otherwise ``skip``
    is 0 and ``rows`` the stored chunk's rows of the array (Zarr stores the last chunk
    at full size, padded).
    """

    stored: StoredChunk
    record: Record = field(repr=False)
    skip: int
    rows: int
    itemsize: int = 4

    @property
    def rel(self) -> str:
        """The object holding the chunk, relative to the store root."""
        return self.stored.rel

    @property
    def index(self) -> int:
        """The chunk's number in its array."""
        return self.stored.index

    @property
    def sha256(self) -> str | None:
        return self.stored.sha256

    @property
    def stored_rows(self) -> int:
        """Rows the stored chunk decodes to."""
        return self.stored.stored_rows

    @property
    def n_features(self) -> int:
        """Columns of the stored chunk."""
        return self.stored.columns

    @property
    def nbytes(self) -> int:
        """Bytes of the decoded stored chunk."""
        return self.stored.stored_rows * self.stored.columns * self.itemsize

    @property
    def whole_file(self) -> bool:
        """Whether the chunk is a file of its own (a segment's) rather than a byte range."""
        return isinstance(self.record, SegmentRecord)

    @property
    def owner(self) -> str:
        """The segment or pack, for messages."""
        return describe(self.record)


class ChunkFiles(Sequence[ChunkFile]):
    """The chunks of a :class:`ChunkIndex` as :class:`ChunkFile` records, each made when
    asked for: chunk ``i`` is rows ``[skips[i], skips[i] + rows[i])`` of ``stored[at[i]]``,
    a stored chunk of ``records[at[i]]``."""

    def __init__(
        self,
        stored: Sequence[StoredChunk],
        records: Sequence[Record],
        at: Int64s,
        skips: Int64s,
        rows: Int64s,
    ) -> None:
        self._stored = stored
        self._records = records
        self._at = at
        self._skips = skips
        self._rows = rows

    def __len__(self) -> int:
        return int(self._at.shape[0])

    @overload
    def __getitem__(self, i: int) -> ChunkFile: ...

    @overload
    def __getitem__(self, i: slice) -> list[ChunkFile]: ...

    def __getitem__(self, i: int | slice) -> ChunkFile | list[ChunkFile]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        at = int(self._at[i])
        return ChunkFile(
            self._stored[at], self._records[at], int(self._skips[i]), int(self._rows[i])
        )


class ChunkIndex:
    """The chunks of every source of a dataset, numbered source by source.

    A source is a sequence of :class:`SourcePart` laid end to end; its chunks are the
    pieces of stored chunks that hold those rows, in order: chunk ``first_chunk[s] + k``
    holds the source's rows from ``chunk_starts[s][k]`` on. Several chunks may be pieces
    of one stored chunk (a pack's chunk holds rows of many symbols, which are separate
    sources when a symbol's sessions are joined): :attr:`loads` are the distinct stored
    chunks, and :attr:`load_of` maps each chunk to its load, so that a stored chunk is read
    and decoded once for all of its pieces. Segments and whole packs have one chunk per load.

    The index is computed for every part at once (no Python per part or chunk); only the
    loads are made as :class:`ChunkFile` records up front.

    Parameters
    ----------
    version
        The store version the parts belong to.
    sources
        The sources and their parts.
    """

    def __init__(self, version: StoreVersion, sources: Sources) -> None:
        records, held = sources.distinct_records()
        stored, owners, first_stored, chunk_rows, array_rows = _stored_chunks(version, records)
        row_start = np.asarray([c.row_start for c in stored], dtype=np.int64)
        stored_rows = np.asarray([c.rows for c in stored], dtype=np.int64)
        lo, hi = sources.lo, sources.hi
        outside = np.flatnonzero((lo < 0) | (hi < lo) | (hi > array_rows[held]))
        if outside.size:
            k = int(outside[0])
            raise IndexError(f"rows {lo[k]}:{hi[k]} outside the array's {array_rows[held[k]]} rows")
        step = chunk_rows[held]
        first = lo // step
        count = np.where(hi > lo, (hi - 1) // step + 1 - first, 0)
        total = int(count.sum())
        part = np.repeat(np.arange(lo.shape[0], dtype=np.int64), count)
        # Per part a base, then its consecutive stored chunks.
        base = first_stored[held] + first - (np.cumsum(count) - count)
        at = np.repeat(base, count) + np.arange(total, dtype=np.int64)
        piece_lo = np.maximum(row_start[at], lo[part])
        piece_hi = np.minimum(row_start[at] + stored_rows[at], hi[part])
        starts = sources.part_offsets()[part] + piece_lo - lo[part]
        self.skips: Int64s = piece_lo - row_start[at]
        self.files = ChunkFiles(stored, owners, at, self.skips, piece_hi - piece_lo)
        self.source_rows: Int64s = sources.rows
        self.first_chunk: Int64s = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)[
            sources.first
        ]
        self.chunk_starts: list[Int64s] = np.split(starts, self.first_chunk[1:-1])
        self._row_base = np.concatenate([[0], np.cumsum(self.source_rows)[:-1]]).astype(np.int64)
        # Chunk starts as rows of all sources laid end to end: one searchsorted finds any chunk.
        self._global_starts: Int64s = np.repeat(self._row_base, np.diff(self.first_chunk)) + starts
        self._group_loads(at, stored, owners)

    def _group_loads(
        self, at: Int64s, stored: Sequence[StoredChunk], owners: Sequence[Record]
    ) -> None:
        """The distinct stored chunks ``at`` names, numbered in order of first use."""
        distinct, first_use, inverse = np.unique(at, return_index=True, return_inverse=True)
        order = np.argsort(first_use, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        self.load_of: Int64s = rank[inverse.reshape(-1)].astype(np.int64)
        self.loads: list[ChunkFile] = [
            ChunkFile(stored[k], owners[k], 0, stored[k].rows) for k in distinct[order].tolist()
        ]
        self.one_to_one = len(self.loads) == len(self.files)
        self._by_load = np.argsort(self.load_of, kind="stable")
        self._load_ptr = np.searchsorted(
            self.load_of[self._by_load], np.arange(len(self.loads) + 1)
        )

    def __len__(self) -> int:
        return int(self.skips.shape[0])

    def pieces(self, load: int) -> list[int]:
        """The chunks that are pieces of load ``load``."""
        if self.one_to_one:
            return [load]
        lo, hi = int(self._load_ptr[load]), int(self._load_ptr[load + 1])
        pieces: list[int] = self._by_load[lo:hi].tolist()
        return pieces

    def loads_of(self, chunks: Int64s) -> Int64s:
        """The sorted, distinct loads holding ``chunks``."""
        if self.one_to_one:
            return chunks
        loads: Int64s = np.unique(self.load_of[chunks])
        return loads

    def loads_reading(
        self, source_ids: npt.ArrayLike, lo: npt.ArrayLike, hi: npt.ArrayLike
    ) -> npt.NDArray[np.bool_]:
        """Which loads hold some of rows ``[lo[b], hi[b])`` of source ``source_ids[b]``."""
        first = self.chunk_of(source_ids, lo)
        last = self.chunk_of(source_ids, np.asarray(hi, dtype=np.int64) - 1)
        edges = np.zeros(len(self.files) + 1, dtype=np.int64)
        np.add.at(edges, first, 1)
        np.add.at(edges, last + 1, -1)
        needed = np.zeros(len(self.loads), dtype=np.bool_)
        needed[self.load_of[np.cumsum(edges[:-1]) > 0]] = True
        return needed

    def chunk_of(self, source_ids: npt.ArrayLike, rows: npt.ArrayLike) -> Int64s:
        """The chunk holding row ``rows[b]`` of source ``source_ids[b]``, for every ``b``."""
        global_rows = self._row_base[np.asarray(source_ids, dtype=np.int64)] + np.asarray(
            rows, dtype=np.int64
        )
        chunks: Int64s = np.searchsorted(self._global_starts, global_rows, side="right") - 1
        return chunks

    def chunks_of(self, source_ids: npt.ArrayLike, starts: npt.ArrayLike, window: int) -> Int64s:
        """The sorted, distinct chunks read by the windows ``(source_ids[b], starts[b])``."""
        first = self.chunk_of(source_ids, starts)
        last = self.chunk_of(source_ids, np.asarray(starts, dtype=np.int64) + (window - 1))
        if first.size == 0:
            return first.astype(np.int64)
        span = int((last - first).max())
        if span == 0:
            return np.unique(first)
        # Windows longer than a chunk read every chunk between their first and last.
        steps = np.arange(span + 1, dtype=np.int64)
        every = first[:, None] + steps[None, :]
        return np.unique(np.minimum(every, last[:, None]))


def _stored_chunks(
    version: StoreVersion, records: Sequence[Record]
) -> tuple[list[StoredChunk], list[Record], Int64s, Int64s, Int64s]:
    """The ``values`` chunks of ``records``, laid end to end.

    Returns ``(stored, owners, first, chunk_rows, rows)``: every stored chunk and the record
    it belongs to, and per record the index of its first chunk, its rows per chunk and its
    array's rows.
    """
    maps = [version.chunk_map(record, "values") for record in records]
    counts = [len(m.chunks) for m in maps]
    owners = [record for record, n in zip(records, counts, strict=True) for _ in range(n)]
    first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    chunk_rows = np.asarray([max(m.chunk_rows, 1) for m in maps], dtype=np.int64)
    rows = np.asarray([m.rows for m in maps], dtype=np.int64)
    return [chunk for m in maps for chunk in m.chunks], owners, first, chunk_rows, rows


def read_array(
    loader: ChunkLoader,
    version: StoreVersion,
    record: Record,
    array: str,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """A segment's or pack's whole ``array``, read chunk by chunk through ``loader``.

    ``ts`` is ``int64 [rows]``, ``values`` and ``labels`` ``float32 [rows, n]``; full
    chunks are decoded straight into the result (``out`` when given). Arrays stored with
    codecs only zarr-python reads are read through it.
    """
    chunk_map = version.chunk_map(record, array)
    itemsize, dtype = (8, np.int64) if array == "ts" else (4, np.float32)
    columns = chunk_map.chunks[0].columns if chunk_map.chunks else 0
    shape = (chunk_map.rows,) if array == "ts" else (chunk_map.rows, columns)
    if out is None:
        out = np.empty(shape, dtype=dtype)
    if not all(chunk.decoded_here for chunk in chunk_map.chunks):
        out[...] = loader.zarr_array(record, array)[...]
        return out
    for stored in chunk_map.chunks:
        file = ChunkFile(stored, record, 0, stored.rows, itemsize)
        part = out[stored.row_start : stored.row_start + stored.rows]
        if stored.rows == stored.stored_rows:
            loader.read_into(file, part.reshape(-1).view(np.uint8))
        else:  # the last chunk, stored full-size
            full = np.empty((stored.stored_rows, *shape[1:]), dtype=dtype)
            loader.read_into(file, full.reshape(-1).view(np.uint8))
            part[...] = full[: stored.rows]
    return out


@dataclass
class LoadTimes:
    """Seconds one load spent per stage, and the stored bytes it read."""

    fetch_s: float = 0.0
    decode_s: float = 0.0
    prepare_s: float = 0.0
    bytes_read: int = 0


class ChunkLoader:
    """Loads one stored chunk as a C-contiguous float32 ``[stored_rows, features]`` array.

    A chunk's stored bytes are read once per load (a local file with ``pread``, into the
    caller's buffer for a raw chunk; other fsspec URLs with one request each, ranged for a
    pack), checked against what the store recorded for them (:func:`check_chunk`: the
    CRC-32C, or with ``verify`` the sha256), and decoded, into a recycled buffer when the
    caller passes one (fresh memory costs a page fault per 4 KiB, which on a VM is as slow
    as decoding). Then the selected feature columns are kept and the normalization
    applied. Nothing is memory-mapped: a file cut short by another process while chunks
    are in use is an error naming it when a read comes short, never a SIGBUS, and a loaded
    chunk is private memory that no change of the file can alter. Every step that can take
    long releases the GIL, so loads run in parallel threads.

    Parameters
    ----------
    version
        The store version the chunks belong to.
    columns
        Feature columns to keep, in order (``None``: all).
    scale
        ``(mean, std)`` per kept column to apply, or ``None``.
    verify
        ``True``: check every chunk against its recorded sha256 (a segment's manifest, a
        pack's ``chunk_sha256``) instead of its CRC-32C; ``"none"``: check nothing (how
        the bench measures what the default check costs).
    """

    def __init__(
        self,
        version: StoreVersion,
        columns: Int64s | None,
        scale: tuple[Floats, Floats] | None,
        verify: bool | Literal["none"] = False,
    ) -> None:
        if verify not in (False, True, "none"):
            raise ValueError(f"verify: expected True, False or 'none', got {verify!r}")
        self._version = version
        self._location = version.location
        self._columns = columns
        self._scale = scale
        self._verify = verify
        self._arrays: dict[tuple[str, str], zarr.Array[Any]] = {}
        self._scratch = threading.local()  # each thread's buffer for compressed bytes

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_arrays"] = {}  # zarr arrays are opened again where needed
        del state["_scratch"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._scratch = threading.local()

    def nbytes(self, file: ChunkFile) -> int:
        """Bytes the loaded chunk holds."""
        kept = file.n_features if self._columns is None else int(self._columns.shape[0])
        return file.stored_rows * kept * 4

    def load(self, file: ChunkFile, out: Floats | None = None) -> tuple[Floats, LoadTimes]:
        """The stored chunk's rows (all ``stored_rows``, whatever ``file.skip``), ready to
        gather from, and what loading them cost.

        ``out`` is a spare C-contiguous float32 buffer of ``file.nbytes`` bytes to decode
        into (ignored when it does not fit).
        """
        times = LoadTimes()
        started = time.perf_counter()
        if not file.stored.decoded_here:
            values = self._through_zarr(file)
            times.decode_s = time.perf_counter() - started
        elif not file.stored.written:  # Zarr writes no chunk of NaN alone (floats only)
            values = _target(out, file)
            values.fill(np.nan)
        else:
            values = _target(out, file)
            times = self._read(file, values.reshape(-1).view(np.uint8))
        prepared = time.perf_counter()
        values = self._prepare(values)
        times.prepare_s = time.perf_counter() - prepared
        return values, times

    def read_into(self, file: ChunkFile, out: Bytes) -> None:
        """Decode the stored chunk into ``out``, ``file.nbytes`` bytes (no column subset,
        no normalization): how whole arrays (labels, timestamps) are read."""
        if not file.stored.written:  # Zarr writes no chunk of NaN alone (floats only)
            out.view(np.float32).fill(np.nan)
            return
        self._read(file, out)

    def advise(self, file: ChunkFile) -> None:
        """Ask the kernel to start reading a local chunk that will be needed soon."""
        if not self._location.is_local or not hasattr(os, "posix_fadvise"):
            return
        try:
            fd = os.open(self._location.path(file.rel), os.O_RDONLY)
        except OSError:
            return  # the load itself reports a missing file, with its name
        try:
            length = 0 if file.whole_file else file.stored.nbytes or 0
            os.posix_fadvise(fd, file.stored.offset, length, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)

    def zarr_array(self, record: Record, array: str) -> zarr.Array[Any]:
        """The record's ``array`` opened with zarr-python (kept open for later reads)."""
        key = (record.path, array)
        found = self._arrays.get(key)
        if found is not None:
            return found
        opened: zarr.Array[Any] | None
        if isinstance(record, SegmentRecord):
            opened = getattr(self._version.open_segment(record), array)
        else:  # behind the pack's guard, as every reader of a pack
            group = self._version.open_pack(record)
            node = group.get(array)
            opened = node if isinstance(node, zarr.Array) else None
        if opened is None:
            raise StoreCorruptError(f"{describe(record)} has no array {array!r}")
        self._arrays[key] = opened
        return opened

    # -- reading and decoding ------------------------------------------------------------

    def _where(self, file: ChunkFile) -> str:
        where = self._location.display(file.rel)
        if file.whole_file:
            return where
        chunk = f"chunk {file.index} of {file.owner}"
        return f"{where} bytes {file.stored.offset}+{file.stored.nbytes} ({chunk})"

    def _read(self, file: ChunkFile, out: Bytes) -> LoadTimes:
        """Fetch the stored bytes, check them, decode them into ``out``."""
        times = LoadTimes()
        started = time.perf_counter()
        where = self._where(file)
        stored, crc = self._fetch(file, where, out)
        times.bytes_read = len(stored)
        times.fetch_s = time.perf_counter() - started
        if self._verify != "none":
            check_chunk(file.stored, _buffer(stored), where, sha256=self._verify is True, crc=crc)
        decoded = time.perf_counter()
        if stored is not out:
            self._decode(file, stored, where, out)
        times.decode_s = time.perf_counter() - decoded
        return times

    def _fetch(self, file: ChunkFile, where: str, out: Bytes) -> tuple[Stored, int | None]:
        """The chunk's stored bytes (``out`` itself when a raw chunk was read straight into
        it, else bytes still to decode into ``out``), and their CRC-32C when it was
        computed as they were read (local files)."""
        if self._location.is_local:
            return self._read_local(file, where, out)
        stored = file.stored
        try:
            if file.whole_file or stored.nbytes is None:
                return self._location.read_bytes(file.rel), None
            end = stored.offset + stored.nbytes
            data = self._location.read_range(file.rel, stored.offset, end)
        except FileNotFoundError as exc:
            raise _missing(file, where) from exc
        if len(data) != stored.nbytes:
            raise _short(file, where, stored.offset + len(data))
        return data, None

    def _read_local(self, file: ChunkFile, where: str, out: Bytes) -> tuple[Bytes, int | None]:
        """A local chunk read with ``pread`` (:func:`read_checked`: its CRC-32C computed as
        it is read, when the check wants it): a raw one into ``out``, a compressed one into
        this thread's scratch buffer. A symlink is refused (a store holds plain files), a
        missing file named, and so is a file shorter than the chunk, also one cut short
        while it is read."""
        try:
            fd = os.open(self._location.path(file.rel), os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError as exc:
            raise _missing(file, where) from exc
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise StoreCorruptError(
                f"{where} is a symlink; a store holds plain files only (rule: store_relative_path)",
                [(file.rel, "symlink")],
            ) from exc
        try:
            size = os.fstat(fd).st_size
            stored = file.stored
            if file.whole_file or stored.nbytes is None:
                offset, length = 0, size
                if stored.stored_as_decoded:
                    _check_size(size, file, where)
                else:
                    stored.check_stored_size(size, file.nbytes, where)
            else:
                offset, length = stored.offset, stored.nbytes
                if size < offset + length:
                    raise _short(file, where, size)
            into = out if stored.stored_as_decoded else self._scratch_bytes(length)
            checksum = self._verify is False and stored.crc32c is not None
            done, crc = read_checked(fd, offset, into, checksum=checksum)
            if done < length:
                raise _short(file, where, offset + done)
            return into, crc if checksum else None
        finally:
            os.close(fd)

    def _scratch_bytes(self, nbytes: int) -> Bytes:
        """This thread's buffer for a compressed chunk's stored bytes (grown as needed)."""
        buffer: Bytes | None = getattr(self._scratch, "buffer", None)
        if buffer is None or buffer.shape[0] < nbytes:
            buffer = np.empty(max(nbytes, 1 << 16), dtype=np.uint8)
            self._scratch.buffer = buffer
        return buffer[:nbytes]

    def _decode(self, file: ChunkFile, stored: Stored, where: str, out: Bytes) -> None:
        if file.stored.stored_as_decoded:
            _check_size(len(stored), file, where)
        decode_chunk(file.stored, _buffer(stored), out, file.nbytes, where)

    def _through_zarr(self, file: ChunkFile) -> Floats:
        array = self.zarr_array(file.record, "values")
        lo = file.stored.row_start
        out = np.full((file.stored_rows, file.n_features), np.nan, dtype=np.float32)
        out[: file.stored.rows] = array[lo : lo + file.stored.rows]
        return out

    def _prepare(self, values: Floats) -> Floats:
        """Feature subset and normalization (``values`` is the load's own memory)."""
        if self._columns is not None:
            kept = fresh_buffer((values.shape[0], int(self._columns.shape[0])))
            values = np.take(values, self._columns, axis=1, out=kept)
        if self._scale is not None:
            if not values.flags.writeable:
                values = values.copy()  # a zarr-python array may be read-only
            values -= self._scale[0]
            values /= self._scale[1]
        return np.ascontiguousarray(values, dtype=np.float32)


def _buffer(stored: Stored) -> bytes | memoryview:
    return stored if isinstance(stored, bytes) else stored.data


def _target(out: Floats | None, file: ChunkFile) -> Floats:
    """Where ``file``'s chunk is decoded: ``out`` when it fits, else a fresh buffer."""
    shape = (file.stored_rows, file.n_features)
    if out is None or out.nbytes != file.nbytes or not out.flags.c_contiguous:
        return fresh_buffer(shape)
    return out if out.shape == shape else out.reshape(shape)


def _check_size(size: int, file: ChunkFile, where: str) -> None:
    if size != file.nbytes:
        kind = "float32 features" if file.itemsize == 4 else "int64 values"
        raise StoreCorruptError(
            f"{where}: raw chunk of {size} bytes, expected {file.nbytes} "
            f"({file.stored_rows} rows x {file.n_features} {kind})",
            [(file.rel, "wrong size")],
        )


def _missing(file: ChunkFile, where: str) -> StoreCorruptError:
    what = f"chunk {file.index} of {file.owner}" if file.whole_file else "the shard"
    return StoreCorruptError(f"{where}: {what} is missing", [(file.rel, "missing")])


def _short(file: ChunkFile, where: str, size: int) -> StoreCorruptError:
    what = "file" if file.whole_file else "shard"
    return StoreCorruptError(
        f"{where}: the {what} ends at byte {size:,}, before the chunk does (cut short, "
        "possibly while being read)",
        [(file.rel, f"{what} too short")],
    )
