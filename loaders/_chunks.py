"""Feature chunks of a window dataset: which stored rows each source reads, and loading them.

Where rows are stored is the store's answer (:meth:`StoreVersion.chunk_map`): a segment's
chunk is a whole file, a pack's a byte range of a shard. Reading a chunk is the store's
too (:meth:`StoreVersion.reader`: fetched, checked, decoded). This module keeps the
loader's side of it: numbering the chunks source by source, and applying the feature
subset and normalization to a loaded chunk.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np
import numpy.typing as npt

from ticktensor._memory import fresh_buffer
from ticktensor.store import ChunkReader, FeatureBlock, StoredChunk, StoreVersion, Verify

__all__ = [
    "ChunkFile",
    "ChunkIndex",
    "ChunkLoader",
    "LoadTimes",
    "SourcePart",
    "Sources",
]

Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]


@dataclass(frozen=True)
class SourcePart:
    """Rows ``[lo, hi)`` of a block (a segment or a pack), read by one source of a dataset.

    ``symbol`` is the one symbol those rows belong to, or ``None`` for a whole pack (the
    rows of every symbol it holds, sorted by symbol).
    """

    record: FeatureBlock = field(repr=False)
    lo: int
    hi: int
    symbol: str | None

    @property
    def rows(self) -> int:
        return self.hi - self.lo


@dataclass(frozen=True)
class Sources:
    """A dataset's sources as columns: source ``s`` reads parts ``first[s]:first[s + 1]``
    laid end to end, part ``k`` being rows ``[lo[k], hi[k])`` of the block
    ``records[record[k]]``.

    ``symbol[s]`` is the source's one symbol (``None`` for a whole pack); ``phase[s]`` the
    rows of the symbol's series before its first part that were left unread (joined
    series only), so the stride grid does not depend on the time filter.
    """

    records: tuple[FeatureBlock, ...]
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

    def distinct_records(self) -> tuple[list[FeatureBlock], Int64s]:
        """The distinct blocks (by path) some part reads, and each part's number among them."""
        numbers: dict[str, int] = {}
        distinct: list[FeatureBlock] = []
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
    pack's shard) and how they decode, as the store's chunk map gives it. A source whose
    rows start inside a stored chunk (a symbol's rows in a pack, joined across sessions)
    skips the chunk's first rows; otherwise ``skip`` is 0 and ``rows`` the stored chunk's
    rows of the array (Zarr stores the last chunk at full size, padded).
    """

    stored: StoredChunk
    skip: int
    rows: int

    @property
    def rel(self) -> str:
        """The object holding the chunk, relative to the store root."""
        return self.stored.rel

    @property
    def index(self) -> int:
        """The chunk's number in its array."""
        return self.stored.index

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
        """Bytes of the decoded stored chunk (float32 features)."""
        return self.stored.stored_rows * self.stored.columns * 4

    @property
    def owner(self) -> str:
        """The segment or pack, for messages."""
        return self.stored.owner


class ChunkFiles(Sequence[ChunkFile]):
    """The chunks of a :class:`ChunkIndex` as :class:`ChunkFile` records, each made when
    asked for: chunk ``i`` is rows ``[skips[i], skips[i] + rows[i])`` of ``stored[at[i]]``."""

    def __init__(
        self, stored: Sequence[StoredChunk], at: Int64s, skips: Int64s, rows: Int64s
    ) -> None:
        self._stored = stored
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
        return ChunkFile(self._stored[int(self._at[i])], int(self._skips[i]), int(self._rows[i]))


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
        stored, first_stored, chunk_rows, array_rows = _stored_chunks(version, records)
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
        self.files = ChunkFiles(stored, at, self.skips, piece_hi - piece_lo)
        self.source_rows: Int64s = sources.rows
        self.first_chunk: Int64s = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)[
            sources.first
        ]
        self.chunk_starts: list[Int64s] = np.split(starts, self.first_chunk[1:-1])
        self._row_base = np.concatenate([[0], np.cumsum(self.source_rows)[:-1]]).astype(np.int64)
        # Chunk starts as rows of all sources laid end to end: one searchsorted finds any chunk.
        self._global_starts: Int64s = np.repeat(self._row_base, np.diff(self.first_chunk)) + starts
        self._group_loads(at, stored)

    def _group_loads(self, at: Int64s, stored: Sequence[StoredChunk]) -> None:
        """The distinct stored chunks ``at`` names, numbered in order of first use."""
        distinct, first_use, inverse = np.unique(at, return_index=True, return_inverse=True)
        order = np.argsort(first_use, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        self.load_of: Int64s = rank[inverse.reshape(-1)].astype(np.int64)
        self.loads: list[ChunkFile] = [
            ChunkFile(stored[k], 0, stored[k].rows) for k in distinct[order].tolist()
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
    version: StoreVersion, records: Sequence[FeatureBlock]
) -> tuple[list[StoredChunk], Int64s, Int64s, Int64s]:
    """The ``values`` chunks of ``records``, laid end to end.

    Returns ``(stored, first, chunk_rows, rows)``: every stored chunk, and per record the
    index of its first chunk, its rows per chunk and its array's rows.
    """
    maps = version.chunk_maps(records, "values")
    counts = [len(m.chunks) for m in maps]
    first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    chunk_rows = np.asarray([max(m.chunk_rows, 1) for m in maps], dtype=np.int64)
    rows = np.asarray([m.rows for m in maps], dtype=np.int64)
    return [chunk for m in maps for chunk in m.chunks], first, chunk_rows, rows


@dataclass
class LoadTimes:
    """Seconds one load spent per stage, and the stored bytes it read."""

    fetch_s: float = 0.0
    decode_s: float = 0.0
    prepare_s: float = 0.0
    bytes_read: int = 0


class ChunkLoader:
    """Loads one stored chunk as a C-contiguous float32 ``[stored_rows, features]`` array.

    The store's reader (:meth:`StoreVersion.reader`) reads the chunk's stored bytes,
    checks them against what was recorded for them and decodes them, into a recycled
    buffer when the caller passes one (fresh memory costs a page fault per 4 KiB, which
    on a VM is as slow as decoding). Then the selected feature columns are kept and the
    normalization applied.

    Parameters
    ----------
    version
        The store version the chunks belong to.
    columns
        Feature columns to keep, in order (``None``: all).
    scale
        ``(mean, std)`` per kept column to apply, or ``None``.
    verify
        ``True``: check every chunk against its recorded sha256 instead of its CRC-32C;
        ``"none"``: check nothing (how the bench measures what the default check costs).
    """

    def __init__(
        self,
        version: StoreVersion,
        columns: Int64s | None,
        scale: tuple[Floats, Floats] | None,
        verify: Verify = False,
    ) -> None:
        self.reader: ChunkReader = version.reader(verify)
        self._columns = columns
        self._scale = scale

    def __copy__(self) -> ChunkLoader:
        """A loader with a reader of its own (the store's reader copies without the
        arrays it opened: a forked child makes its own filesystem clients)."""
        new = ChunkLoader.__new__(ChunkLoader)
        new.__dict__.update(self.__dict__)
        new.reader = copy.copy(self.reader)
        return new

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
        values = _target(out, file)
        read = self.reader.read_chunk(file.stored, values.reshape(-1).view(np.uint8))
        prepared = time.perf_counter()
        values = self._prepare(values)
        prepare_s = time.perf_counter() - prepared
        return values, LoadTimes(read.fetch_s, read.decode_s, prepare_s, read.bytes_read)

    def advise(self, file: ChunkFile) -> None:
        """A chunk needed a little later (see :meth:`ChunkReader.advise`)."""
        self.reader.advise(file.stored)

    def fetch_ahead(self, file: ChunkFile) -> None:
        """A chunk about to be loaded: an object store's request goes out now."""
        self.reader.fetch_ahead((file.stored,))

    def stop_fetching(self) -> None:
        """End the requests made ahead (at the end of a pass)."""
        self.reader.stop()

    def _prepare(self, values: Floats) -> Floats:
        """Feature subset and normalization (``values`` is the load's own memory)."""
        if self._columns is not None:
            kept = fresh_buffer((values.shape[0], int(self._columns.shape[0])))
            values = np.take(values, self._columns, axis=1, out=kept)
        if self._scale is not None:
            values -= self._scale[0]
            values /= self._scale[1]
        return np.ascontiguousarray(values, dtype=np.float32)


def _target(out: Floats | None, file: ChunkFile) -> Floats:
    """Where ``file``'s chunk is decoded: ``out`` when it fits, else a fresh buffer."""
    shape = (file.stored_rows, file.n_features)
    if out is None or out.nbytes != file.nbytes or not out.flags.c_contiguous:
        return fresh_buffer(shape)
    return out if out.shape == shape else out.reshape(shape)
