"""A session's blocks: each block's merged rows and features, handed on in block order.

A session is merged and its features computed a block of symbols at a time, on
several threads. Each block hands its rows of each kind to that kind's table, and its
features to the pack, through a :class:`~ticktensor.ingest._handoff.Handoff`: they take
the blocks in order and let go of each as they go, so a block's arrays live until its
table rows are encoded and its features are in the pack's chunks, not until the
session is written. What the session's report needs of a block stays in a small
:class:`BlockSummary`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.ingest._feature_engine import FeatureArrays, SymbolFeatures
from ticktensor.ingest._feature_rows import CLOCK_INPUTS
from ticktensor.ingest._handoff import Handoff
from ticktensor.ingest._merge import Merged
from ticktensor.ingest._session_stats import StatsPartial
from ticktensor.schemas import EventKind, FeatureSpec
from ticktensor.store import PackData, PackWriter, TableEncoder

__all__ = [
    "BlockSummary",
    "KindSummary",
    "TakenFeatures",
    "TakenRows",
    "block_features",
    "joined_features",
    "take_features",
    "take_rows",
]

G = TypeVar("G", bound=np.generic)


@dataclass(frozen=True)
class KindSummary:
    """What a session's report needs of one kind's merged rows of a block."""

    rows: int
    #: Rows per input file.
    stored: dict[str, int]
    #: Quarantine entries (rule ``duplicate``) of the rows taken out, if any.
    duplicates: pa.Table | None
    #: The symbols with rows, sorted.
    present: list[str]

    @classmethod
    def of(cls, merged: Merged) -> KindSummary:
        return cls(merged.table.num_rows, merged.stored, merged.duplicates, merged.present)


@dataclass(frozen=True)
class BlockSummary:
    """One block: per kind its summary, and per symbol its feature rows and the values
    beyond float32's range (symbols with none left out)."""

    kinds: dict[EventKind, KindSummary]
    rows: dict[str, int]
    infinite: dict[str, int]

    @classmethod
    def of(cls, merged: dict[EventKind, Merged], features: SymbolFeatures | None) -> BlockSummary:
        kinds = {k: KindSummary.of(m) for k, m in merged.items()}
        if features is None:
            return cls(kinds, {}, {})
        # A block's symbols are a few hundred of the session's thousands: the others,
        # and its symbols without rows, are left out (counted as 0).
        counts = np.diff(features.offsets)
        infinite = _infinite_per_symbol(features.features, features.offsets)
        return cls(
            kinds,
            _nonzero(features.symbols, counts),
            _nonzero(features.symbols, infinite),
        )


@dataclass
class TakenRows:
    """A kind's rows of a session: its table encoded as the blocks came, or, when the
    store holds rows of the kind in the session, the blocks' tables to merge with them."""

    encoder: TableEncoder | None = None
    tables: list[pa.Table] = field(default_factory=list)


def take_rows(blocks: Handoff[pa.Table], encoder: TableEncoder, held: pa.Table | None) -> TakenRows:
    """Encode the blocks' tables of a kind in order with ``encoder`` (when ``held``, the
    stored rows of the kind, is None), else keep them for the merge with ``held``."""
    if held is not None:
        return TakenRows(tables=list(blocks))
    for table in blocks:
        encoder.append(table)
    return TakenRows(encoder=encoder)


@dataclass
class TakenFeatures:
    """A session's feature rows: appended to its pack as the blocks came, with their
    statistics, or, when the store holds feature rows of the session, the blocks'
    features to merge with them."""

    pack: PackWriter | None = None
    stats: StatsPartial = field(default_factory=StatsPartial)
    parts: list[SymbolFeatures] = field(default_factory=list)


def take_features(
    blocks: Handoff[SymbolFeatures | None],
    pack: PackWriter | None,
    spec: FeatureSpec,
    held: object | None,
) -> TakenFeatures:
    """Append the blocks' feature rows to ``pack`` in order, symbols with rows only
    (when ``held``, the stored feature rows of the session, is None), else keep them
    (also without a ``pack``: the session's stored rows are known before they are read)."""
    if held is not None or pack is None:
        return TakenFeatures(parts=[f for f in blocks if f is not None])
    taken = TakenFeatures(pack=pack)
    for computed in blocks:
        if computed is None:
            continue
        counts = np.diff(computed.offsets)
        with_rows = np.flatnonzero(counts)
        if with_rows.size:
            pack.append(
                [computed.symbols[i] for i in with_rows.tolist()],
                np.concatenate([[0], np.cumsum(counts[with_rows])]),
                computed.features.ts,
                computed.features.values,
                computed.features.labels,
            )
            taken.stats.add_period(spec, computed.features.ts, computed.features.values)
    return taken


def joined_features(parts: list[SymbolFeatures], rows: dict[str, int]) -> PackData | None:
    """The blocks' feature rows one after the other, of the symbols with any (``rows``
    per symbol); None when no symbol has feature rows."""
    if not parts or sum(rows.values()) == 0:
        return None
    # Blocks are ranges of the sorted symbols: their rows, one after the other, are
    # every symbol's rows in symbol order.
    symbols = tuple(sorted(s for s, n in rows.items() if n))
    return PackData(
        symbols,
        np.concatenate([[0], np.cumsum([rows[s] for s in symbols])]).astype(np.int64),
        _concatenated([p.features.ts for p in parts]),
        _concatenated([p.features.values for p in parts]),
        _concatenated([p.features.labels for p in parts]),
    )


def block_features(
    spec: FeatureSpec | None, market: dict[EventKind, Merged]
) -> SymbolFeatures | None:
    """The features of one block's symbols; None without a spec or rows on its clock."""
    from ticktensor.ingest.features import compute_session_features

    if spec is None or not market:
        return None
    clock_kind = CLOCK_INPUTS[spec.clock][0]
    if clock_kind not in market or market[clock_kind].table.num_rows == 0:
        return None
    # Every market kind of the session, empty ones too, so that a symbol sees the same
    # inputs whichever block it falls in; the symbols as codes, not text.
    return compute_session_features(
        {k: m.table.set_column(m.table.schema.get_field_index("symbol"), "symbol", m.symbols)
         for k, m in market.items()},
        spec,
    )  # fmt: skip


def _concatenated(parts: list[npt.NDArray[G]]) -> npt.NDArray[G]:
    """The blocks' arrays one after the other; the array itself when there is one."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _infinite_per_symbol(
    features: FeatureArrays, offsets: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Per symbol (``offsets``): values (features and labels) that are +/-inf, beyond
    float32's range (or infinite already in the events)."""
    per_row: npt.NDArray[np.int64] | None = None
    for values in (features.values, features.labels):
        # Finding none, the usual case, in slices: a flag per value of the whole block
        # would be a fresh array of several MB, paid in page faults.
        if any(np.isinf(values[lo : lo + _SLICE]).any() for lo in range(0, len(values), _SLICE)):
            counts = np.isinf(values).sum(axis=1)
            per_row = counts if per_row is None else per_row + counts
    if per_row is None:
        return np.zeros(len(offsets) - 1, dtype=np.int64)
    return _per_symbol(per_row.astype(np.int64), offsets)


#: Rows of a block's feature matrix looked at at a time for infinite values.
_SLICE = 1 << 14


def _nonzero(symbols: tuple[str, ...], counts: npt.NDArray[np.int64]) -> dict[str, int]:
    """``counts`` by symbol, the symbols counting more than 0 only."""
    where = np.flatnonzero(counts)
    return dict(zip([symbols[i] for i in where.tolist()], counts[where].tolist(), strict=True))


def _per_symbol(
    per_row: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """``per_row`` summed over each symbol's rows."""
    total = np.concatenate([[0], np.cumsum(per_row)])
    return np.asarray(total[offsets[1:]] - total[offsets[:-1]], dtype=np.int64)
