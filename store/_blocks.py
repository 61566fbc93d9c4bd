"""Feature blocks: the one shape in which readers outside ``store/`` see stored rows.

A store version keeps its feature rows in packs (format 2: a session's rows of every
symbol, sorted by symbol) and, in stores written before packs, in segments (format 1: one
symbol's rows of a session). Readers (the loaders) see both as :class:`FeatureBlock`:
where its rows are, which sessions and times they cover, and (:class:`SymbolRows`) which
rows belong to which symbol. They never see the records of either format; the store
adapts them here and takes blocks back wherever it reads (chunk maps, the chunk reader).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ._manifest import PackRecord, SegmentRecord

__all__ = ["FeatureBlock", "SymbolRows", "block_of", "record_of"]

Int64s = npt.NDArray[np.int64]
Record = SegmentRecord | PackRecord


@dataclass(frozen=True)
class FeatureBlock:
    """Feature rows stored together, ``rows`` of them, of session ``session``.

    ``path`` identifies the block in its store; ``ts_start``/``ts_end`` are its first and
    last timestamps (ns UTC); ``label_names`` the labels stored with it (none: its labels
    are NaN). ``symbol`` is set when the block holds one symbol's rows by construction (a
    segment of a format-1 store), ``None`` when it holds a session's rows of many symbols
    (a pack), whose runs :meth:`StoreVersion.symbol_rows` gives.
    """

    path: str
    session: str
    rows: int
    ts_start: int
    ts_end: int
    label_names: tuple[str, ...]
    symbol: str | None
    record: Record = field(repr=False, compare=False)


def block_of(record: Record) -> FeatureBlock:
    """The block a segment's or a pack's record describes."""
    symbol = record.symbol if isinstance(record, SegmentRecord) else None
    return FeatureBlock(
        record.path,
        record.session,
        record.rows,
        record.ts_start,
        record.ts_end,
        record.label_names,
        symbol,
        record,
    )


def record_of(stored: FeatureBlock | Record) -> Record:
    """The record behind ``stored`` (a block, or a record already)."""
    return stored.record if isinstance(stored, FeatureBlock) else stored


@dataclass(frozen=True)
class SymbolRows:
    """Which rows of a block belong to which symbol: symbol ``symbols[i]`` (sorted) holds
    rows ``offsets[i]:offsets[i + 1]``."""

    symbols: tuple[str, ...]
    offsets: Int64s

    def rows_of_many(
        self, symbols: Sequence[str] | npt.NDArray[np.str_]
    ) -> tuple[Int64s, Int64s, npt.NDArray[np.bool_]]:
        """Rows ``[lo, hi)`` of each of ``symbols`` at once, and whether the block holds
        it (where it does not, ``lo`` and ``hi`` are meaningless)."""
        names = np.asarray(symbols, dtype=np.str_)
        held_names = np.asarray(self.symbols, dtype=np.str_)
        if held_names.shape[0] == 0:
            empty = np.zeros(names.shape, dtype=np.int64)
            return empty, empty, np.zeros(names.shape, dtype=np.bool_)
        at = np.minimum(np.searchsorted(held_names, names), held_names.shape[0] - 1)
        held: npt.NDArray[np.bool_] = held_names[at] == names
        return self.offsets[at], self.offsets[at + 1], held
