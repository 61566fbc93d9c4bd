"""Events as the engine takes them: one quote or trade, or columns of many in replay order."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ConfigError
from ticktensor.schemas import EventKind

__all__ = [
    "BAR",
    "BOOK",
    "QUOTE",
    "TRADE",
    "Bar",
    "BookUpdate",
    "EventBatch",
    "Quote",
    "Trade",
    "batch_of_tables",
]

QUOTE = 0
"""The native kind number of a quote."""
TRADE = 1
"""The native kind number of a trade."""
BAR = 2
"""The native kind number of a bar (the ohlcv clock)."""
BOOK = 3
"""The native kind number of an MBP-10 book event (the mbp10 clock)."""
DEPTH = 10
"""Levels of an MBP-10 event."""
_LEVELS = tuple(
    f"{side}_{what}_{level:02d}"
    for what in ("px", "sz")
    for side in ("bid", "ask")
    for level in range(DEPTH)
)
_ACTIONS = {code: float(k) for k, code in enumerate("ACMTFR")}
WIDTH = 8
"""Values per event in a batch (the native core's)."""

_VALUES = {
    EventKind.QUOTES: ("bid_px", "ask_px", "bid_sz", "ask_sz"),
    EventKind.TRADES: ("price", "size", "side"),
    EventKind.OHLCV: (
        "open",
        "high",
        "low",
        "close",
        "volume",
        "trade_count",
        "vwap",
        "interval_ns",
    ),
    EventKind.MBP10: ("price", "size", "side"),
}
_KINDS = {
    EventKind.QUOTES: QUOTE,
    EventKind.TRADES: TRADE,
    EventKind.OHLCV: BAR,
    EventKind.MBP10: BOOK,
}
# Per clock: the kind giving the rows, and the kind joined onto them (first at equal times).
_CLOCK_KINDS = {
    "quotes": (EventKind.QUOTES, EventKind.TRADES),
    "trades": (EventKind.TRADES, EventKind.QUOTES),
    "ohlcv": (EventKind.OHLCV, None),
    "mbp10": (EventKind.MBP10, EventKind.TRADES),
    "bars": (EventKind.TRADES, EventKind.QUOTES),
}
# Columns the features do not read but the duplicate rule compares ("every column").
_OTHER = {
    EventKind.QUOTES: ("ts_recv", "venue", "bid_ct", "ask_ct", "sequence"),
    EventKind.TRADES: ("ts_recv", "venue", "trade_id", "sequence"),
    EventKind.OHLCV: ("venue", "interval_ns"),
}
_READ = {"ts_event", "symbol", "price", "size", "side", "action"}


def _field(value: float | None) -> float:
    """A pushed value: None is a null (NaN to the engine); a NaN, which ingest quarantines
    as not finite, is passed on as infinite so that the engine refuses it under that rule."""
    if value is None:
        return math.nan
    value = float(value)
    return math.inf if math.isnan(value) else value


@dataclass(frozen=True)
class Quote:
    """A top-of-book update; ``None`` for an absent price or size."""

    symbol: str
    ts: int
    bid_px: float | None
    ask_px: float | None
    bid_sz: float | None
    ask_sz: float | None
    key: int = 0
    """Tells apart quotes equal in every other field (e.g. a sequence number)."""

    def values(self) -> tuple[float, ...]:
        """The engine's values."""
        return (
            _field(self.bid_px),
            _field(self.ask_px),
            _field(self.bid_sz),
            _field(self.ask_sz),
        )


@dataclass(frozen=True)
class Trade:
    """A trade: price, size and aggressor side (+1 buy, -1 sell, 0 unknown)."""

    symbol: str
    ts: int
    price: float
    size: float
    side: int
    key: int = 0
    """Tells apart trades equal in every other field (e.g. a trade id's hash)."""

    def values(self) -> tuple[float, ...]:
        """The engine's values."""
        return (_field(self.price), _field(self.size), _field(self.side))


@dataclass(frozen=True)
class Bar:
    """A bar of the ohlcv clock, stamped by its open (``ts``) and known at its close
    (``ts + interval_ns``, the row's time); ``None`` where a column is not reported."""

    symbol: str
    ts: int
    interval_ns: int
    open: float
    high: float
    low: float
    close: float
    volume: float | None = None
    trade_count: int | None = None
    vwap: float | None = None
    key: int = 0
    """Tells apart bars equal in every other field."""

    @property
    def close_ts(self) -> int:
        """The row's time: the bar's close."""
        return self.ts + self.interval_ns

    def values(self) -> tuple[float, ...]:
        """The engine's values."""
        columns = (self.open, self.high, self.low, self.close, self.volume)
        tail = (_field(self.trade_count), _field(self.vwap), float(self.interval_ns))
        return (*map(_field, columns), *tail)


def _action(code: str | None) -> float:
    """An action letter as the engine's number: NaN for none (not_null), 99 for an unknown
    letter (action_domain)."""
    if code is None or code == "":
        return math.nan
    return _ACTIONS.get(code, 99.0)


@dataclass(frozen=True)
class BookUpdate:
    """An MBP-10 event: the book event (price, size, side, action letter) and the ten
    levels of each side after it, best first; ``None`` for an empty level."""

    symbol: str
    ts: int
    price: float | None
    size: float | None
    side: int
    action: str
    bid_px: tuple[float | None, ...]
    ask_px: tuple[float | None, ...]
    bid_sz: tuple[float | None, ...]
    ask_sz: tuple[float | None, ...]
    key: int = 0
    """Tells apart events equal in every other field (e.g. a sequence number)."""

    def values(self) -> tuple[float, ...]:
        """The engine's values."""
        return (_field(self.price), _field(self.size), _field(self.side), _action(self.action))

    def levels(self) -> npt.NDArray[np.float64]:
        """The engine's 40 level values."""
        sides = (self.bid_px, self.ask_px, self.bid_sz, self.ask_sz)
        if any(len(side) != DEPTH for side in sides):
            raise ConfigError(f"a book update needs {DEPTH} levels per side and quantity")
        return np.array([_field(v) for side in sides for v in side], dtype=np.float64)


class EventBatch(NamedTuple):
    """Events as columns, in the order the engine takes them.

    ``values`` (``[n, 8]``) holds quotes' ``bid_px, ask_px, bid_sz, ask_sz``, trades'
    ``price, size, side`` and bars' ``open, high, low, close, volume, trade_count, vwap,
    interval_ns`` (then zeros); NaN is a null. ``symbol`` numbers ``symbols``; a bar's ``ts`` is its
    close time.
    """

    kind: npt.NDArray[np.uint8]
    symbol: npt.NDArray[np.uint32]
    ts: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    key: npt.NDArray[np.uint64]
    symbols: tuple[str, ...]
    levels: npt.NDArray[np.float64] | None = None
    """``[n, 40]`` levels of MBP-10 events (``bid_px_00..09, ask_px_00..09, bid_sz_00..09,
    ask_sz_00..09``), None without any."""

    def __len__(self) -> int:
        return int(self.ts.size)


def _columns(table: pa.Table, kind: EventKind) -> npt.NDArray[np.float64]:
    values = np.zeros((table.num_rows, WIDTH), dtype=np.float64)
    for j, name in enumerate(_VALUES[kind]):
        if name not in table.column_names:
            raise ConfigError(f"{kind.value} events lack column {name!r}")
        column = table.column(name).cast(pa.float64())
        out = np.array(column.to_numpy(zero_copy_only=False), dtype=np.float64)
        # A NaN that is not a null breaks ingest's "finite" rule: refuse it under that rule.
        nan = np.asarray(pc.fill_null(pc.is_nan(column), False).to_numpy(zero_copy_only=False))
        out[nan.astype(bool)] = np.inf
        values[:, j] = out
    if kind is EventKind.MBP10:
        values[:, 3] = [_action(a) for a in table.column("action").to_pylist()]
    return values


def _levels(table: pa.Table) -> npt.NDArray[np.float64]:
    levels = np.empty((table.num_rows, len(_LEVELS)), dtype=np.float64)
    for j, name in enumerate(_LEVELS):
        column = table.column(name).cast(pa.float64())
        out = np.array(column.to_numpy(zero_copy_only=False), dtype=np.float64)
        nan = np.asarray(pc.fill_null(pc.is_nan(column), False).to_numpy(zero_copy_only=False))
        out[nan.astype(bool)] = np.inf
        levels[:, j] = out
    return levels


def _keys(table: pa.Table, kind: EventKind) -> npt.NDArray[np.uint64]:
    if kind is EventKind.MBP10:  # the levels too: the engine compares values and key only
        other = [c for c in table.column_names if c not in _READ]
    else:
        other = [c for c in _OTHER[kind] if c in table.column_names]
    if not other or table.num_rows == 0:
        return np.zeros(table.num_rows, dtype=np.uint64)
    frame = pl.from_arrow(table.select(other))
    assert isinstance(frame, pl.DataFrame)
    return frame.hash_rows(seed=0).to_numpy().astype(np.uint64, copy=False)


def batch_of_tables(events: Mapping[EventKind, pa.Table], clock: str) -> EventBatch:
    """Canonical event tables (any symbols) as one batch in replay order: the kinds the
    clock reads (its own and the one joined onto its rows).

    Events are taken by time; of events stamped alike, those of the kind joined onto the
    clock's rows come first (the batch side's as-of joins see every event stamped at or
    before a row), each kind in its table's order.
    """
    own, joined = _CLOCK_KINDS[clock]
    kinds = [k for k in (joined, own) if k is not None and k in events]
    names = sorted({s for k in kinds for s in events[k].column("symbol").unique().to_pylist()})
    number = {name: i for i, name in enumerate(names)}
    parts = []
    for kind in kinds:
        table = events[kind]
        symbols = table.column("symbol").to_pylist()
        ts = np.asarray(table.column("ts_event").cast(pa.int64()).to_numpy(), dtype=np.int64)
        if kind is EventKind.OHLCV:  # known at its close
            interval = table.column("interval_ns").cast(pa.int64()).to_numpy(zero_copy_only=False)
            ts = ts + np.asarray(interval, dtype=np.int64)
        code = _KINDS[kind]
        parts.append(
            (
                np.full(ts.size, code, dtype=np.uint8),
                np.fromiter((number[s] for s in symbols), dtype=np.uint32, count=ts.size),
                ts,
                _columns(table, kind),
                _keys(table, kind),
                np.full(ts.size, 0 if kind is joined else 1, dtype=np.uint8),
                _levels(table) if kind is EventKind.MBP10 else np.zeros((ts.size, 0)),
            )
        )
    if not parts:
        raise ConfigError(f"no events of the kinds clock {clock!r} reads")
    book = any(kind is EventKind.MBP10 for kind in kinds)
    levels = [
        p[6] if p[6].shape[1] else np.zeros((p[2].size, len(_LEVELS) if book else 0)) for p in parts
    ]
    columns = [np.concatenate(c) for c in zip(*(p[:6] for p in parts), strict=True)]
    ts, first = columns[2], columns[5]
    order = np.lexsort((np.arange(ts.size), first, ts))
    codes, symbol, _, values, key, _ = (c[order] for c in columns)
    stacked = np.concatenate(levels)[order] if book else None
    return EventBatch(codes, symbol, ts[order], values, key, tuple(names), stacked)
