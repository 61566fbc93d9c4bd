"""The row frame of a feature clock: one row per event, with point-in-time derived columns."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl
import pyarrow as pa

from ticktensor.errors import ConfigError, SchemaError
from ticktensor.schemas import MBP_DEPTH, BarRule, Clock, EventKind

from .bars import QUOTE_COLUMNS, _asof, _bar_frame, _event_frame, _per_series

__all__ = ["CLOCK_INPUTS", "SERIES", "TRADE_QUANTITIES", "Rows"]

SERIES = "_series"
"""The column numbering the series (symbols) of a session's rows, in sorted symbol order."""

CLOCK_INPUTS: dict[str, tuple[EventKind, EventKind | None]] = {
    "quotes": (EventKind.QUOTES, EventKind.TRADES),
    "mbp10": (EventKind.MBP10, EventKind.TRADES),
    "trades": (EventKind.TRADES, EventKind.QUOTES),
    "bars": (EventKind.TRADES, EventKind.QUOTES),
    "ohlcv": (EventKind.OHLCV, None),
}
"""Per clock: the event kind that gives the rows, and the optional one joined as of each row."""

TRADE_QUANTITIES: tuple[str, ...] = ("volume", "dollar_volume", "trade_count", "signed_volume")
"""Additive trade quantities, per row and over windows."""

_BOOK_CLOCKS = ("quotes", "mbp10")
_LEVELS = tuple(f"{s}_sz_{i:02d}" for s in ("bid", "ask") for i in range(MBP_DEPTH))
_PRICE = {"quotes": "mid", "mbp10": "mid", "trades": "price", "bars": "close", "ohlcv": "close"}


def _per_trade(quantity: str) -> pl.Expr:
    if quantity == "volume":
        return pl.col("size")
    if quantity == "dollar_volume":
        return pl.col("price") * pl.col("size")
    if quantity == "trade_count":
        return pl.repeat(1.0, pl.len(), dtype=pl.Float64)
    return pl.col("side") * pl.col("size")


def _needs(quantity: str) -> tuple[str, ...]:
    return {"volume": ("size",), "dollar_volume": ("price", "size"), "trade_count": ()}.get(
        quantity, ("side", "size")
    )


class Rows:
    """The rows of one clock and the columns features draw on, derived on demand.

    Every derived column at row ``i`` uses only events with ``ts <= ts[i]`` (the trades
    clock: only trades up to row ``i`` itself); :meth:`column` adds them lazily so a
    spec pays only for what it uses.

    With ``by_symbol``, the event tables hold many symbols, sorted by (symbol, time),
    with a :data:`SERIES` column numbering them: the rows are every symbol's rows one
    after the other, each computed as if its symbol were alone (joins match the
    symbol; shifts, sums and windows restart at each symbol, see :meth:`per_series`).

    ``fixed_order`` (feature spec version 2 on) makes window sums over rows add their
    terms oldest first, one by one, the order an incremental engine repeats.
    """

    def __init__(
        self,
        clock: Clock,
        events: Mapping[EventKind, pa.Table],
        bar: BarRule | None,
        *,
        by_symbol: bool = False,
        fixed_order: bool = False,
    ):
        self.clock = clock
        self.fixed_order = fixed_order
        self.by = SERIES if by_symbol else None
        by = self.by
        primary, secondary = CLOCK_INPUTS[clock]
        if primary not in events:
            raise ConfigError(
                f"clock {clock!r} needs {primary.value} events; got {sorted(map(str, events))}"
            )
        self.other: pa.Table | None = events.get(secondary) if secondary else None
        table = events[primary]
        self._trades: pl.DataFrame | None = None
        if clock == "quotes":
            self.frame = _event_frame(table, "quotes", QUOTE_COLUMNS, by)
        elif clock == "mbp10":
            self.frame = _event_frame(table, "mbp10", ("bid_px_00", "ask_px_00", *_LEVELS), by)
            self.frame = self.frame.with_columns(
                *(pl.col(f"{c}_00").alias(c) for c in QUOTE_COLUMNS if f"{c}_00" in self.frame)
            )
        elif clock == "trades":
            self.frame = _event_frame(table, "trades", ("price", "size", "side"), by)
        elif clock == "bars":
            assert bar is not None  # FeatureSpec guarantees a rule for clock "bars"
            bars = _bar_frame(table, bar, self.other, by=by)
            self.frame = bars.rename({"ts_event": "ts_open", "ts_close": "ts"}).with_columns(
                pl.col("trade_count").cast(pl.Float64), pl.col(by or "ts").set_sorted()
            )
        else:
            self.frame = self._ohlcv(table, by)
        if clock == "trades" and self.other is not None:
            quotes = _event_frame(self.other, "quotes", QUOTE_COLUMNS, by)
            self.frame = _asof(self.frame, "ts", quotes, QUOTE_COLUMNS, by)
        if clock in _BOOK_CLOCKS and self.other is not None:
            self._trades = _event_frame(self.other, "trades", ("price", "size", "side"), by)

    @staticmethod
    def _ohlcv(table: pa.Table, by: str | None) -> pl.DataFrame:
        columns = ("interval_ns", "open", "high", "low", "close", "volume", "trade_count", "vwap")
        frame = _event_frame(table, "ohlcv", columns, by)
        # A bar is known once it has closed: its row time is open + interval.
        frame = frame.with_columns(
            (pl.col("ts") + pl.col("interval_ns").cast(pl.Int64)).alias("ts"),
            (pl.col("vwap").fill_null(pl.col("close")) * pl.col("volume")).alias("dollar_volume"),
        )
        back = frame["ts"].diff() < 0
        if by is not None:
            back = back & (frame[by].diff() == 0)
        if frame.height > 1 and back.any():
            row = int(back.arg_true()[0])
            raise SchemaError(f"ohlcv row {row}: close time (ts_event + interval_ns) goes back")
        return _flagged_sorted(frame, by or "ts")

    @property
    def height(self) -> int:
        """Number of rows."""
        return self.frame.height

    def per_series(self, expr: pl.Expr) -> pl.Expr:
        """``expr`` computed within each symbol's rows (as is, when there is one symbol).

        Needed by every expression that reads other rows (shifts, cumulative and
        rolling sums): without it a symbol's first rows would see the previous
        symbol's last ones.
        """
        return _per_series(expr, self.by)

    def shift(self, expr: pl.Expr, n: int) -> pl.Expr:
        """``expr`` of the row ``n`` rows earlier, null where that row is another symbol's.

        The rows are sorted by symbol, so rows ``i - n`` and ``i`` are of one symbol
        exactly when their series numbers are equal: the same values as a shift within
        each symbol (:meth:`per_series`), without splitting the rows by symbol.
        """
        if self.by is None:
            return expr.shift(n)
        by = pl.col(self.by)
        return pl.when(by == by.shift(n)).then(expr.shift(n))

    def shared(self, name: str, expr: pl.Expr) -> pl.Expr:
        """``expr``, added as the column ``name`` of the rows on first use and read from
        there after: features that share a formula compute it once."""
        if name not in self.frame.columns:
            self.frame = self.frame.with_columns(expr.alias(name))
        return pl.col(name)

    def column(self, name: str) -> pl.Expr:
        """The column ``name`` of the rows, deriving it first if needed."""
        if name not in self.frame.columns:
            derived = self._derive(name)  # may itself join columns onto the frame
            if name not in self.frame.columns:
                self.frame = self.frame.with_columns(derived.alias(name))
        return pl.col(name)

    def _missing(self, what: str) -> ConfigError:
        _, secondary = CLOCK_INPUTS[self.clock]
        given = f"; pass {secondary.value} events too" if secondary else ""
        return ConfigError(f"{what} is not available on clock {self.clock!r}{given}")

    def _derive(self, name: str) -> pl.Expr:
        if name == "px":
            return self.column(_PRICE[self.clock])
        if name == "mid":
            return (self.column("bid_px") + self.column("ask_px")) / 2
        if name in TRADE_QUANTITIES:
            if self.clock in _BOOK_CLOCKS:
                cum = self.column(f"cum_{name}")
                return self.per_series(cum - cum.shift(1, fill_value=0.0))
            if self.clock == "trades":
                return self._trade_column(name, self.frame)
            if name == "signed_volume" and self.clock == "ohlcv":
                raise self._missing("signed_volume (needs trade sides)")
            return pl.col(name).cast(pl.Float64)
        if name.startswith("cum_") and "@" not in name:
            if self.clock in _BOOK_CLOCKS:
                self._join_cum(name.removeprefix("cum_"), "ts", name)
                return pl.col(name)
            return self.per_series(self.column(name.removeprefix("cum_")).cum_sum())
        if name.startswith("cum_"):  # cum_<quantity>@<ns>: as of ts - ns
            quantity, _, ns = name.removeprefix("cum_").partition("@")
            key = f"_ts_minus_{ns}"
            self.frame = self.frame.with_columns((pl.col("ts") - int(ns)).alias(key))
            self._join_cum(quantity, key, name)
            self.frame = self.frame.drop(key)
            return pl.col(name)
        if name == "last_trade_signed_size":
            if self.clock == "trades":
                return self._trade_column("signed_volume", self.frame)
            self._join_trades(_per_trade("signed_volume").alias(name), "ts", name)
            return pl.col(name)
        raise self._missing(f"column {name!r}")

    def _trade_column(self, quantity: str, trades: pl.DataFrame) -> pl.Expr:
        if missing := [c for c in _needs(quantity) if c not in trades.columns]:
            raise SchemaError(f"trades have no column(s) {missing}, needed for {quantity}")
        return _per_trade(quantity)

    def _join_trades(self, value: pl.Expr, key: str, name: str) -> None:
        """As-of join a per-trade value (``ts <= row[key]``) onto the rows; 0 before any trade."""
        if self.clock in _BOOK_CLOCKS:
            trades = self._trades
            if trades is None:
                self.frame = self.frame.with_columns(pl.lit(0.0).alias(name))
                return
        else:  # cumulative sums over the rows themselves, deduplicated by time in _asof
            trades = self.frame
        keys = [] if self.by is None else [self.by]
        source = trades.select(*keys, "ts", value.alias(name))
        joined = _asof(self.frame.select(*keys, key), key, source, (name,), self.by)
        self.frame = self.frame.with_columns(joined[name].fill_null(0.0))

    def _join_cum(self, quantity: str, key: str, name: str) -> None:
        if self.clock in _BOOK_CLOCKS:
            if self._trades is None:  # no trades given: nothing traded
                # Version 2 on: a column of zeros, whose windows are +0.0 as with trades
                # given; polars turns windows of a constant column into -0.0.
                zero = pl.lit(0.0)
                if self.fixed_order:
                    zero = pl.lit(pl.Series(name, np.zeros(self.height), pl.Float64))
                self.frame = self.frame.with_columns(zero.alias(name))
            else:
                per = self._trade_column(quantity, self._trades)
                self._join_trades(self.per_series(per.cum_sum()), key, name)
        else:
            self._join_trades(self.column(f"cum_{quantity}"), key, name)


def _flagged_sorted(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    """``frame`` with its column ``name`` flagged sorted, in place: what
    ``with_columns(pl.col(name).set_sorted())`` gives, without a query of its own."""
    return frame.replace_column(frame.get_column_index(name), frame[name].set_sorted())
