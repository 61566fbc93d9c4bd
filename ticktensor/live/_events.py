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

__all__ = ["BAR", "QUOTE", "TRADE", "Bar", "EventBatch", "Quote", "Trade", "batch_of_tables"]

QUOTE = 0
"""The native kind number of a quote."""
TRADE = 1
"""The native kind number of a trade."""
BAR = 2
"""The native kind number of a bar (the ohlcv clock)."""
WIDTH = 8
"""Values per event in a batch (the native core's)."""

_VALUES = {
    EventKind.QUOTES: ("bid_px", "ask_px", "bid_sz", "ask_sz"),
    EventKind.TRADES: ("price", "size", "side"),
    EventKind.OHLCV: ("open", "high", "low", "close", "volume", "trade_count", "vwap"),
}
_KINDS = {EventKind.QUOTES: QUOTE, EventKind.TRADES: TRADE, EventKind.OHLCV: BAR}
# Columns the features do not read but the duplicate rule compares ("every column").
_OTHER = {
    EventKind.QUOTES: ("ts_recv", "venue", "bid_ct", "ask_ct", "sequence"),
    EventKind.TRADES: ("ts_recv", "venue", "trade_id", "sequence"),
    EventKind.OHLCV: ("venue", "interval_ns"),
}


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
        return (*map(_field, columns), _field(self.trade_count), _field(self.vwap))


class EventBatch(NamedTuple):
    """Events as columns, in the order the engine takes them.

    ``values`` (``[n, 8]``) holds quotes' ``bid_px, ask_px, bid_sz, ask_sz``, trades'
    ``price, size, side`` and bars' ``open, high, low, close, volume, trade_count, vwap``
    (then zeros); NaN is a null. ``symbol`` numbers ``symbols``; a bar's ``ts`` is its
    close time.
    """

    kind: npt.NDArray[np.uint8]
    symbol: npt.NDArray[np.uint32]
    ts: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    key: npt.NDArray[np.uint64]
    symbols: tuple[str, ...]

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
    return values


def _keys(table: pa.Table, kind: EventKind) -> npt.NDArray[np.uint64]:
    other = [c for c in _OTHER[kind] if c in table.column_names]
    if not other or table.num_rows == 0:
        return np.zeros(table.num_rows, dtype=np.uint64)
    frame = pl.from_arrow(table.select(other))
    assert isinstance(frame, pl.DataFrame)
    return frame.hash_rows(seed=0).to_numpy().astype(np.uint64, copy=False)


def batch_of_tables(events: Mapping[EventKind, pa.Table], clock: str) -> EventBatch:
    """Canonical quote, trade and ohlcv tables (any symbols) as one batch in replay order.

    Events are taken by time; of events stamped alike, those of the kind joined onto the
    clock's rows come first (the batch side's as-of joins see every event stamped at or
    before a row), each kind in its table's order.
    """
    kinds = [k for k in _KINDS if k in events]
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
        joined = (clock == "quotes") == (kind is EventKind.TRADES)
        parts.append(
            (
                np.full(ts.size, code, dtype=np.uint8),
                np.fromiter((number[s] for s in symbols), dtype=np.uint32, count=ts.size),
                ts,
                _columns(table, kind),
                _keys(table, kind),
                np.full(ts.size, 0 if joined else 1, dtype=np.uint8),
            )
        )
    if not parts:
        raise ConfigError("no quote, trade or ohlcv events to replay")
    columns = [np.concatenate(c) for c in zip(*parts, strict=True)]
    ts, first = columns[2], columns[5]
    order = np.lexsort((np.arange(ts.size), first, ts))
    codes, symbol, _, values, key, _ = (c[order] for c in columns)
    return EventBatch(codes, symbol, ts[order], values, key, tuple(names))
