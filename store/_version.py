"""A read-only view of one store version: what readers (the loaders) pin."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import zarr

from ticktensor.errors import StoreCorruptError

from ._blocks import FeatureBlock, SymbolRows, block_of, record_of
from ._chunk_map import ChunkMap, segment_chunk_map
from ._layout import Layout
from ._location import Location
from ._manifest import FeatureStats, Manifest, PackRecord, SegmentRecord, TableRecord
from ._packs import (
    PackData,
    PackIndex,
    check_pack_folder,
    open_pack,
    pack_chunk_map,
    pack_content_hash,
    pack_layout,
    read_pack_index,
)
from ._reader import ChunkReader, Verify
from ._segments import (
    SegmentArrays,
    check_segment_content,
    open_segment,
    read_array,
)
from ._state import VersionState
from ._tables import read_table

__all__ = ["SegmentData", "StoreVersion"]

#: Records whose chunk maps are read at once from an object store.
_MAP_REQUESTS: Final = 16


@dataclass(frozen=True)
class SegmentData:
    """A segment read fully into memory."""

    ts: npt.NDArray[np.int64]
    values: npt.NDArray[np.float32]
    labels: npt.NDArray[np.float32] | None


class StoreVersion:
    """One published version of a store. Immutable: later commits do not change it."""

    def __init__(self, location: Location, manifest: Manifest | VersionState) -> None:
        self._location = location
        self._source = manifest
        self._indexes: dict[str, PackIndex] = {}  # a race reads an index twice, no harm

    @classmethod
    def of_state(cls, location: Location, state: VersionState) -> StoreVersion:
        """The version a state describes; its sorted manifest is built on first use."""
        return cls(location, state)

    @property
    def manifest(self) -> Manifest:
        """Everything the version contains (records sorted by key)."""
        if isinstance(self._source, VersionState):
            return self._source.manifest  # built once, then kept by the state
        return self._source

    def __repr__(self) -> str:
        return (
            f"StoreVersion({self._location.url!r}, version={self.version}, "
            f"segments={len(self.segments)}, packs={len(self.packs)}, rows={self.rows})"
        )

    @property
    def location(self) -> Location:
        return self._location

    @property
    def url(self) -> str:
        """The store's path or URL, as it was opened."""
        return self._location.url

    @property
    def version(self) -> int:
        return self.manifest.version

    @property
    def feature_names(self) -> tuple[str, ...]:
        return self.manifest.feature_names

    @property
    def label_names(self) -> tuple[str, ...]:
        return self.manifest.label_names

    @property
    def stats(self) -> FeatureStats | None:
        return self.manifest.stats

    @property
    def segments(self) -> tuple[SegmentRecord, ...]:
        return self.manifest.segments

    @property
    def packs(self) -> tuple[PackRecord, ...]:
        """The version's packs (one per packed session), by session."""
        return self.manifest.packs

    @property
    def tables(self) -> tuple[TableRecord, ...]:
        return self.manifest.tables

    @functools.cached_property
    def symbols(self) -> tuple[str, ...]:
        """Every symbol with a segment, a pack's rows or a table of its own (reads each
        pack's index; a table of every symbol of a session is keyed ``ALL_SYMBOLS``)."""
        packed: set[str] = set()
        if self.packs:
            with ThreadPoolExecutor(8, thread_name_prefix="ticktensor-index") as pool:
                # On an object store each index is a request: several in flight at once.
                for index in pool.map(self.pack_index, self.packs):
                    packed.update(index.symbols)
        return tuple(sorted(set(self.manifest.symbols) | packed))

    @functools.cached_property
    def blocks(self) -> tuple[FeatureBlock, ...]:
        """The version's feature rows as blocks, in one shape for both formats: its
        segments (format 1), then its packs in session order."""
        segments = tuple(block_of(record) for record in self.segments)
        packs = sorted(self.packs, key=lambda p: p.session)
        return segments + tuple(block_of(record) for record in packs)

    def block(self, session: str, symbol: str | None = None) -> FeatureBlock:
        """The block of ``session``'s pack, or with ``symbol`` of a format-1 segment;
        ``KeyError`` when there is none."""
        if symbol is None:
            return block_of(self.pack(session))
        return block_of(self.segment(symbol, session))

    def symbol_rows(self, block: FeatureBlock) -> SymbolRows:
        """Which of the block's rows belong to which symbol (a pack's index is read once
        per version view)."""
        record = block.record
        if isinstance(record, PackRecord):
            return self.pack_index(record).symbol_rows
        return SymbolRows((record.symbol,), np.asarray([0, record.rows], dtype=np.int64))

    def pack(self, session: str) -> PackRecord:
        """The pack of ``session``; ``KeyError`` if the session is not packed."""
        if isinstance(self._source, VersionState):
            found = self._source.packs.get((session,))
        else:
            found = next((p for p in self.packs if p.session == session), None)
        if found is None:
            raise KeyError(f"version {self.version} has no pack of session {session}")
        return found

    def pack_index(self, record: PackRecord) -> PackIndex:
        """The pack's symbols and their row ranges (read once per version view)."""
        index = self._indexes.get(record.path)
        if index is None:
            check_pack_folder(self._location, record)  # every reader comes through here
            index = self._indexes[record.path] = read_pack_index(self._location, record)
        return index

    def chunk_map(self, stored: FeatureBlock | SegmentRecord | PackRecord, array: str) -> ChunkMap:
        """Which byte ranges of which objects hold each chunk of the block's (or record's)
        ``array`` (``ts``, ``values`` or ``labels``): what a reader needs to load rows."""
        record = record_of(stored)
        if isinstance(record, PackRecord):
            return pack_chunk_map(self._location, record, self.pack_index(record), array)
        return segment_chunk_map(self._location, record, array)

    def reader(self, verify: Verify = False) -> ChunkReader:
        """The reader of this version's chunks: every chunk's stored bytes checked once,
        as it is loaded, against its recorded CRC-32C (``verify=True``: its sha256;
        ``"none"``: not at all). See :class:`~ticktensor.store.ChunkReader`."""
        return ChunkReader(self, verify)

    def chunk_maps(
        self, records: Sequence[FeatureBlock | SegmentRecord | PackRecord], array: str
    ) -> list[ChunkMap]:
        """:meth:`chunk_map` of each of ``records``, in order; on an object store, where
        each map takes a few requests, many records' requests are in flight at once."""
        if self._location.is_local or len(records) < 2:
            return [self.chunk_map(record, array) for record in records]
        threads = min(_MAP_REQUESTS, len(records))
        with ThreadPoolExecutor(threads, thread_name_prefix="ticktensor-index") as pool:
            return list(pool.map(lambda record: self.chunk_map(record, array), records))

    def read_pack(self, record: PackRecord, *, verify: bool = False) -> PackData:
        """A whole pack in memory, read by :meth:`reader`.

        The pack's structure is checked as it is opened (symbol list, shard indexes,
        codecs against the record) and every inner chunk against its recorded CRC-32C:
        a forged range or a chunk that would decode to more than a chunk holds raises
        :class:`~ticktensor.errors.StoreCorruptError` naming the chunk. With
        ``verify=True`` each inner chunk's sha256 is checked instead, and the decoded
        arrays are hashed again against the pack's content hash.
        """
        where = f"pack {record.session} ({self._location.display(record.path)})"
        index = self.pack_index(record)
        reader = self.reader(verify)
        try:
            ts = reader.read_array(record, "ts")
            values = reader.read_array(record, "values")
            labels = reader.read_array(record, "labels") if record.label_names else None
        finally:
            reader.stop()  # no request thread outlives the read
        if ts.shape[0] != record.rows:
            raise StoreCorruptError(
                f"{where}: {ts.shape[0]} rows stored, the record says {record.rows}"
            )
        if verify:
            layout = pack_layout(record)
            again = pack_content_hash(
                record.session,
                index.symbols,
                index.offsets,
                ts,
                values,
                labels,
                record.feature_names,
                record.label_names,
                layout,
                index.format_version,
            )
            if again != record.content_hash:
                raise StoreCorruptError(
                    f"{where}: decoded content hash {again[:16]} != recorded "
                    f"{record.content_hash[:16]}"
                )
        return PackData(index.symbols, index.offsets, ts, values, labels)

    @property
    def rows(self) -> int:
        return self.manifest.rows

    @property
    def nbytes(self) -> int:
        return self.manifest.nbytes

    def select(
        self,
        symbols: Iterable[str] | None = None,
        start: int | None = None,
        end: int | None = None,
    ) -> tuple[SegmentRecord, ...]:
        """Segments of ``symbols`` that overlap ``[start, end)`` (ns UTC), in key order."""
        wanted = None if symbols is None else set(symbols)
        return tuple(
            s
            for s in self.segments
            if (wanted is None or s.symbol in wanted)
            and (start is None or s.ts_end >= start)
            and (end is None or s.ts_start < end)
        )

    def segment(self, symbol: str, session: str) -> SegmentRecord:
        """The segment of (``symbol``, ``session``); ``KeyError`` if there is none."""
        if isinstance(self._source, VersionState):
            found = self._source.segments.get((symbol, session))
        else:
            found = next((s for s in self.segments if s.key == (symbol, session)), None)
        if found is not None:
            return found
        raise KeyError(f"version {self.version} has no segment {symbol}/{session}")

    def open_segment(self, record: SegmentRecord) -> SegmentArrays:
        """The segment's Zarr arrays (lazy; chunks are read on access)."""
        return open_segment(self._location, record)

    def open_pack(self, record: PackRecord, *, verify: bool = False) -> zarr.Group:
        """The pack's Zarr group (lazy), behind the chunk guard that :meth:`read_pack`
        reads through; ``verify`` checks each inner chunk's sha256 as it is read."""
        return open_pack(self._location, record, self.pack_index(record), verify_chunks=verify)

    def read_segment(self, record: SegmentRecord, *, verify: bool = False) -> SegmentData:
        """Read a whole segment into memory.

        Every file read is checked against the manifest (see :class:`GuardedStore`):
        missing, resized, unlisted or over-large chunks, and chunks that do not match
        the CRC-32C their array records, raise
        :class:`~ticktensor.errors.StoreCorruptError` naming the chunk. With
        ``verify=True`` each chunk's sha256 is checked instead, and the decoded arrays are
        hashed again against the segment's content hash.
        """
        arrays = open_segment(self._location, record, verify_chunks=verify)
        where = f"segment {record.symbol}/{record.session} ({self._location.display(record.path)})"
        ts = read_array(arrays.ts, "ts", np.int64, where)
        values = read_array(arrays.values, "values", np.float32, where)
        labels = (
            None
            if arrays.labels is None
            else read_array(arrays.labels, "labels", np.float32, where)
        )
        if ts.shape[0] != record.rows:
            raise StoreCorruptError(
                f"{self._location.display(record.path)}: {ts.shape[0]} rows stored, "
                f"manifest says {record.rows}"
            )
        if verify:
            layout = Layout.from_dict(dict(record.layout))
            check_segment_content(self._location, record, ts, values, labels, layout)
        return SegmentData(ts=ts, values=values, labels=labels)

    def tables_of(self, kind: str) -> tuple[TableRecord, ...]:
        return tuple(t for t in self.tables if t.kind == kind)

    def read_table(self, record: TableRecord) -> pa.Table:
        return read_table(self._location, record)

    def file_url(self, rel: str) -> str:
        """A path or URL of a file inside the store (for native readers)."""
        return self._location.display(rel)
