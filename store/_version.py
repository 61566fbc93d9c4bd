"""A read-only view of one store version: what readers (the loaders) pin."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.errors import StoreCorruptError

from ._layout import Layout
from ._location import Location
from ._manifest import FeatureStats, Manifest, SegmentRecord, TableRecord
from ._segments import SegmentArrays, open_segment, read_array, segment_content_hash
from ._state import VersionState
from ._tables import read_table

__all__ = ["SegmentData", "StoreVersion"]


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
            f"segments={len(self.segments)}, rows={self.rows})"
        )

    @property
    def location(self) -> Location:
        return self._location

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
    def tables(self) -> tuple[TableRecord, ...]:
        return self.manifest.tables

    @property
    def symbols(self) -> tuple[str, ...]:
        return self.manifest.symbols

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

    def read_segment(self, record: SegmentRecord, *, verify: bool = False) -> SegmentData:
        """Read a whole segment into memory.

        Every file read is checked against the manifest (see :class:`GuardedStore`):
        missing, resized, unlisted or over-large chunks raise
        :class:`~ticktensor.errors.StoreCorruptError` naming the chunk. With
        ``verify=True`` each chunk's sha256 is checked as well, and the decoded arrays are
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
            again = segment_content_hash(
                record.symbol,
                record.session,
                ts,
                values,
                labels,
                record.feature_names,
                record.label_names,
                Layout.from_dict(dict(record.layout)),
            )
            if again != record.content_hash:
                raise StoreCorruptError(
                    f"{self._location.display(record.path)}: decoded content hash "
                    f"{again[:16]} != recorded {record.content_hash[:16]}"
                )
        return SegmentData(ts=ts, values=values, labels=labels)

    def tables_of(self, kind: str) -> tuple[TableRecord, ...]:
        return tuple(t for t in self.tables if t.kind == kind)

    def read_table(self, record: TableRecord) -> pa.Table:
        return read_table(self._location, record)

    def file_url(self, rel: str) -> str:
        """A path or URL of a file inside the store (for native readers)."""
        return self._location.display(rel)
