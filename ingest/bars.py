"""Bars: trades of one symbol resampled to time, volume or dollar bars in the ``ohlcv`` schema.

Rules (see ``docs/features.md``):

- **time bars** (``"1s"``, ``"1m"``, ...) cover ``[open, open + interval)`` with opens on
  the epoch-aligned grid (``ts - ts % interval``); ``interval_ns`` is the interval. Empty
  intervals are skipped by default; ``fill="ffill"`` emits them instead with
  ``open = high = low = close =`` the previous close, zero volume and trade count, and a
  null ``vwap``.
- **volume bars** (``"volume:N"``) and **dollar bars** (``"dollar:N"``, notional
  ``price * size``) close with the trade at which the session's cumulative quantity first
  reaches a multiple of ``N``; no trade is split, so one trade larger than ``N`` closes a
  bar on its own. ``ts_event`` is the first trade's time and ``interval_ns`` the time to the
  last trade. The session's last bar, if it has not reached its threshold, is dropped
  unless ``keep_partial=True``: it would only look closed because the data ended, and
  a later trade would change it (not point in time).

Every bar is labelled by its open time (``ts_event``) and is complete at
``ts_event + interval_ns`` (its *close time*). With ``quotes``, the columns ``bid_px``,
``ask_px``, ``bid_sz`` and ``ask_sz`` hold the last quote at or before the close time
(time bars: strictly before the interval's end), appended after the canonical columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from ticktensor import kernels
from ticktensor.errors import ConfigError, SchemaError
from ticktensor.schemas import BarRule, EventKind, parse_bar_rule, parse_duration_ns, schema_for

__all__ = ["QUOTE_COLUMNS", "dollar_bars", "make_bars", "time_bars", "volume_bars"]

QUOTE_COLUMNS: tuple[str, ...] = ("bid_px", "ask_px", "bid_sz", "ask_sz")
"""Quote columns joined as of each bar's close time when quotes are given."""

Fill = Literal["skip", "ffill"]
_OHLCV = schema_for(EventKind.OHLCV)
_MAX_FILLED = 50_000_000  # a forward-filled grid this long is a mistaken interval, not data
#: A bar's volume-weighted price; null while nothing has traded in it.
_VWAP = (
    pl.when(pl.col("volume") > 0)
    .then(pl.col("dollar_volume") / pl.col("volume"))
    .otherwise(None)
    .alias("vwap")
)


def _event_frame(
    table: pa.Table, what: str, columns: Sequence[str], by: str | None = None
) -> pl.DataFrame:
    """``ts`` (int64 ns, checked sorted) and those of ``columns`` the table has, as float64.

    With ``by`` (the name of a ``uint32`` column numbering the series: the symbols of a
    session), the table holds several series one after the other: ``by`` must not
    decrease and ``ts`` may fall only where a new series starts.
    """
    ts = np.asarray(table.column("ts_event").cast(pa.int64()).to_numpy(), dtype=np.int64)
    data: dict[str, pl.Series] = {}
    back = np.flatnonzero(ts[1:] < ts[:-1]) if ts.size > 1 else np.empty(0, np.int64)
    if by is not None:
        series = np.asarray(table.column(by).to_numpy(), dtype=np.uint32)
        if series.size > 1 and (down := np.flatnonzero(series[1:] < series[:-1])).size:
            row = int(down[0]) + 1
            raise SchemaError(f"{what} row {row}: rows are not grouped by symbol (rule: sorted)")
        back = back[series[back + 1] == series[back]]
        data[by] = pl.Series(by, series, pl.UInt32)
    if back.size:
        row = int(back[0]) + 1
        raise SchemaError(
            f"{what} row {row}: ts_event {ts[row]} is before row {row - 1}'s {ts[row - 1]} "
            f"(rule: sorted by ts_event{' within each symbol' if by else ''})"
        )
    data["ts"] = pl.Series("ts", ts)
    for name in columns:
        if name in table.column_names:
            # Through Arrow, so nulls stay nulls (fill_null can tell them from NaN).
            values = table.column(name).cast(pa.float64()).combine_chunks()
            data[name] = pl.Series(name, values, pl.Float64)
    # The sort order polars may rely on: time for one series, the series for several.
    data[by or "ts"] = data[by or "ts"].set_sorted()
    return pl.DataFrame(data)


def _per_series(expr: pl.Expr, by: str | None) -> pl.Expr:
    """``expr`` evaluated within each series: what it is on one series, ``over(by)`` on several."""
    return expr if by is None else expr.over(by)


def _asof(
    left: pl.DataFrame,
    key: str,
    right: pl.DataFrame,
    columns: Sequence[str],
    by: str | None = None,
) -> pl.DataFrame:
    """Join ``columns`` of the last ``right`` row with ``ts <= left[key]`` (point in time),
    of the same series when ``by`` names the series column of both frames."""
    # Of several rows with one timestamp, the last in the table is the state at that time.
    last = pl.col("ts") != pl.col("ts").shift(-1)
    if by is not None:
        last = last | (pl.col(by) != pl.col(by).shift(-1))
    keys = [] if by is None else [by]
    right = right.filter(last.fill_null(True)).select(
        *keys, pl.col("ts").alias("_asof_ts"), *columns
    )
    joined = left.join_asof(
        right,
        left_on=key,
        right_on="_asof_ts",
        by=by,
        strategy="backward",
        check_sortedness=False,  # both sides are checked sorted (per series) on the way in
    )
    return joined.drop("_asof_ts", strict=False)


def _ranges(starts: npt.NDArray[np.intp], lengths: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """The rows ``starts[i]:starts[i] + lengths[i]`` of every ``i``, one range after the other."""
    before = np.cumsum(lengths) - lengths  # where each range begins in the result
    rows: npt.NDArray[np.intp] = np.arange(int(lengths.sum())) + np.repeat(starts - before, lengths)
    return rows


class _Runs:
    """The runs of rows with equal keys (nulls equal) of a frame: a bar's trades."""

    def __init__(self, frame: pl.DataFrame, keys: Sequence[str]):
        n = frame.height
        if n and all(frame[k].dtype.is_integer() and not frame[k].null_count() for k in keys):
            # Integer keys without nulls (bar numbers, symbols): numpy's comparisons, about
            # twice polars' speed here.
            steps = np.zeros(n - 1, dtype=bool)
            for k in keys:
                values = frame[k].to_numpy()
                steps |= values[1:] != values[:-1]
            later = np.flatnonzero(steps) + 1
        else:
            change = pl.any_horizontal(*(pl.col(k).ne_missing(pl.col(k).shift(1)) for k in keys))
            later = frame.select(change.slice(1).arg_true() + 1).to_series().to_numpy()
        bounds = np.concatenate(([0], later, [n])).astype(np.intp) if n else np.zeros(1, np.intp)
        self.starts = bounds[:-1]
        """The first row of each run."""
        self.lasts = bounds[1:] - 1
        """The last row of each run."""
        self.lengths = np.diff(bounds)
        """The rows of each run."""
        # A run of one row reduces to that row: only the longer ones need reducing.
        self._long = np.flatnonzero(self.lengths > 1)
        long_lengths = self.lengths[self._long]
        self._long_rows = _ranges(self.starts[self._long], long_lengths)
        self._long_starts = np.cumsum(long_lengths) - long_lengths

    def reduce(self, ufunc: np.ufunc, values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """``ufunc`` reduced over each run of ``values``, as ``ufunc.reduceat`` does it."""
        if 2 * self._long_rows.size > values.size:  # mostly long runs: reduce them in place
            return np.asarray(ufunc.reduceat(values, self.starts), dtype=np.float64)
        out: npt.NDArray[np.float64] = values[self.starts]
        if self._long.size:
            out[self._long] = ufunc.reduceat(values[self._long_rows], self._long_starts)
        return out


def _extremes(price: pl.Series, runs: _Runs) -> tuple[pl.Series, pl.Series]:
    """``high`` and ``low`` of each run as polars' ``max``/``min`` give them: NaN counts
    only where a run holds no other number, and a run of nulls alone gives null (of a
    run holding both 0.0 and -0.0, either may come; prices are positive)."""
    values = price.to_numpy()  # nulls as NaN: fmax/fmin skip them like NaN
    high, low = runs.reduce(np.fmax, values), runs.reduce(np.fmin, values)
    if price.null_count():
        valid = runs.reduce(np.add, price.is_not_null().to_numpy().astype(np.float64)) > 0
        return (
            pl.Series("high", pa.array(high, mask=~valid)),
            pl.Series("low", pa.array(low, mask=~valid)),
        )
    return pl.Series("high", high), pl.Series("low", low)


def _aggregate(
    trades: pl.DataFrame, bar: pl.Expr, by: str | None, firsts: Sequence[str] = ()
) -> pl.DataFrame:
    """One row per bar of the trades (sorted by series, then time, so a bar's trades are
    a run of rows): its keys (``by``, ``_bar``), the first of ``firsts``, times, OHLC,
    counts and sums."""
    keys = ["_bar"] if by is None else [by, "_bar"]
    frame = trades.with_columns(bar.alias("_bar"))
    runs = _Runs(frame, keys)
    head = frame.select(*keys, *firsts, "ts", "price")[runs.starts]
    tail = frame.select("ts", "price")[runs.lasts]
    high, low = _extremes(frame["price"], runs)
    # Sums bar by bar (pairwise within a bar): a bar's sum depends on its trades alone,
    # not on where its rows sit, so a session of many symbols sums each bar exactly as
    # the symbol's own series does. Nulls count as 0, as in polars.
    signed = pl.col("side") * pl.col("size") if "side" in frame.columns else pl.lit(0.0)
    sums = {
        "volume": pl.col("size"),
        "dollar_volume": pl.col("price") * pl.col("size"),
        "signed_volume": signed,
    }
    values = frame.select(*(e.cast(pl.Float64).fill_null(0.0).alias(n) for n, e in sums.items()))
    return pl.DataFrame(
        [
            *head.drop("ts", "price"),
            head["ts"].alias("ts_first"),
            tail["ts"].alias("ts_last"),
            head["price"].alias("open"),
            high,
            low,
            tail["price"].alias("close"),
            pl.Series("trade_count", runs.lengths.astype(np.uint64)),
            *(pl.Series(n, runs.reduce(np.add, values[n].to_numpy())) for n in sums),
        ]
    ).with_columns(_VWAP)


def _time_frame(trades: pl.DataFrame, interval: int, fill: Fill, by: str | None) -> pl.DataFrame:
    bars = _time_bars(trades, interval, by)
    if fill == "ffill" and by is not None:
        raise ConfigError("fill='ffill' makes the bars of one symbol; call make_bars per symbol")
    if fill == "ffill" and bars.height:
        first, last = bars["ts_event"][0], bars["ts_event"][-1]
        if (count := (last - first) // interval + 1) > _MAX_FILLED:
            raise ConfigError(
                f"fill='ffill' would emit {count:,} bars of {interval} ns (limit {_MAX_FILLED:,}); "
                "use a longer interval or fill='skip'"
            )
        opens = pl.int_range(first, last + 1, interval, eager=True)
        grid = pl.DataFrame({"ts_event": opens.cast(pl.Int64)})
        bars = grid.join(bars, on="ts_event", how="left", maintain_order="left")
        close = pl.col("close").forward_fill()
        bars = bars.with_columns(
            *(pl.col(c).fill_null(close) for c in ("open", "high", "low")),
            close,
            *(pl.col(c).fill_null(0) for c in ("volume", "trade_count")),
            *(pl.col(c).fill_null(0.0) for c in ("dollar_volume", "signed_volume")),
        )
    return bars.with_columns(
        pl.lit(interval, pl.Int64).alias("interval_ns"),
        (pl.col("ts_event") + interval).alias("ts_close"),
        # Quotes as of the interval's end: strictly before the next bar opens.
        (pl.col("ts_event") + (interval - 1)).alias("_asof_key"),
    )


def _time_bars(trades: pl.DataFrame, interval: int, by: str | None) -> pl.DataFrame:
    """:func:`_aggregate` of the trades by time bar, the bar's open as ``ts_event``.

    Prices, sizes and sides without nulls (canonical trades) go through the native
    kernel (:func:`ticktensor.kernels.time_bars`, one pass); others through polars and
    numpy. Both give the same bars, bit for bit (``tests/ingest/test_bars_fast.py``).
    """
    quantities = [c for c in ("price", "size", "side") if c in trades.columns]
    if trades.height == 0 or any(trades[c].null_count() for c in quantities):
        bars = _aggregate(trades, pl.col("ts") - pl.col("ts") % interval, by)
        return bars.rename({"_bar": "ts_event"})
    column = {c: trades[c].to_numpy() for c in (*quantities, "ts", *([by] if by else []))}
    made = kernels.time_bars(
        column[by] if by else None,
        column["ts"],
        column["price"],
        column["size"],
        column.get("side"),
        interval,
    )
    keys = [pl.Series(by, made.series, pl.UInt32)] if by else []
    return pl.DataFrame(
        [
            *keys,
            pl.Series("ts_event", made.bar, pl.Int64),
            pl.Series("ts_first", made.ts_first, pl.Int64),
            pl.Series("ts_last", made.ts_last, pl.Int64),
            pl.Series("open", made.open, pl.Float64),
            pl.Series("high", made.high, pl.Float64),
            pl.Series("low", made.low, pl.Float64),
            pl.Series("close", made.close, pl.Float64),
            pl.Series("trade_count", made.trades, pl.UInt64),
            pl.Series("volume", made.volume, pl.Float64),
            pl.Series("dollar_volume", made.dollar_volume, pl.Float64),
            pl.Series("signed_volume", made.signed_volume, pl.Float64),
        ]
    ).with_columns(_VWAP)


def _threshold_frame(
    trades: pl.DataFrame, kind: str, threshold: float, keep_partial: bool, by: str | None
) -> pl.DataFrame:
    quantity = pl.col("size") if kind == "volume" else pl.col("price") * pl.col("size")
    # The quantity its series traded before each trade, and in the whole session.
    cum = _per_series(quantity.cum_sum(), by)
    trades = trades.with_columns(cum.alias("_cum")).with_columns(
        _per_series(pl.col("_cum").last(), by).alias("_total")
    )
    before = _per_series(pl.col("_cum").shift(1, fill_value=0.0), by)
    bars = _aggregate(trades, (before / threshold).floor().cast(pl.Int64), by, ("_total",))
    if not keep_partial and bars.height:
        # A series' last bar that has not reached its threshold is not closed yet.
        last = (
            pl.int_range(pl.len()) == pl.len() - 1
            if by is None
            else (pl.col(by) != pl.col(by).shift(-1)).fill_null(True)
        )
        open_ = last & (pl.col("_total") < (pl.col("_bar") + 1) * threshold)
        bars = bars.filter(~open_)
    return (
        bars.drop("_total")
        .rename({"ts_first": "ts_event"})
        .with_columns(
            (pl.col("ts_last") - pl.col("ts_event")).alias("interval_ns"),
            pl.col("ts_last").alias("ts_close"),
            pl.col("ts_last").alias("_asof_key"),
        )
    )


def _bar_frame(
    trades: pa.Table,
    rule: BarRule,
    quotes: pa.Table | None = None,
    *,
    fill: Fill = "skip",
    keep_partial: bool = False,
    by: str | None = None,
) -> pl.DataFrame:
    """Bars as a polars frame with extra columns the feature engine uses.

    Columns: ``ts_event`` (open), ``interval_ns``, ``ts_close``, OHLC, ``volume``,
    ``trade_count``, ``vwap``, ``dollar_volume``, ``signed_volume`` and, with quotes,
    :data:`QUOTE_COLUMNS`. With ``by`` (see :func:`_event_frame`) every series gets its
    own bars, sorted by (series, time) and led by the ``by`` column.
    """
    if fill not in ("skip", "ffill"):
        raise ConfigError(f"fill must be 'skip' or 'ffill', got {fill!r}")
    frame = _event_frame(trades, "trades", ("price", "size", "side"), by)
    if missing := [c for c in ("price", "size") if c not in frame.columns]:
        raise SchemaError(f"trades have no column(s) {missing}; bars need price and size")
    if rule.kind == "time":
        bars = _time_frame(frame, rule.interval_ns, fill, by)
    else:
        bars = _threshold_frame(frame, rule.kind, rule.size, keep_partial, by)
    if quotes is not None:
        book = _event_frame(quotes, "quotes", QUOTE_COLUMNS, by)
        bars = _asof(bars, "_asof_key", book, QUOTE_COLUMNS, by)
    return bars.drop("_bar", "_asof_key", "ts_first", "ts_last", strict=False)


def _first(table: pa.Table, name: str) -> str | None:
    if name not in table.column_names or table.num_rows == 0:
        return None
    distinct = table.column(name).unique()
    if name == "symbol" and len(distinct) > 1:
        raise SchemaError(f"bars are per symbol; trades hold {len(distinct)}: {distinct[:5]}")
    value = distinct[0].as_py()
    return None if value is None else str(value)


def make_bars(
    trades: pa.Table,
    rule: str | BarRule,
    *,
    quotes: pa.Table | None = None,
    fill: Fill = "skip",
    keep_partial: bool = False,
) -> pa.Table:
    """Resample one symbol's trades (sorted by ``ts_event``) to bars in the ``ohlcv`` schema.

    Parameters
    ----------
    trades
        Trades with at least ``ts_event``, ``price`` and ``size`` (``symbol`` and
        ``venue`` are copied when present).
    rule
        ``"1s"``, ``"time:5m"``, ``"volume:1000"``, ``"dollar:1e6"`` or a :class:`BarRule`.
    quotes
        Quotes of the same symbol: adds the last quote as of each bar's close.
    fill
        Time bars only: ``"skip"`` empty intervals or ``"ffill"`` them (see module doc).
    keep_partial
        Volume/dollar bars only: keep the last, not yet full, bar (off by default).

    Returns
    -------
    pyarrow.Table
        The ``ohlcv`` columns in canonical order, then the quote columns if ``quotes``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> trades = pa.table({"ts_event": [0, 4, 1_000_000_000], "price": [10.0, 12.0, 11.0],
    ...                    "size": [1.0, 3.0, 2.0], "symbol": ["X"] * 3})
    >>> bars = make_bars(trades, "1s")
    >>> bars.column("close").to_pylist(), bars.column("vwap").to_pylist()
    ([12.0, 11.0], [11.5, 11.0])
    """
    parsed = parse_bar_rule(rule) if isinstance(rule, str) else rule
    bars = _bar_frame(trades, parsed, quotes, fill=fill, keep_partial=keep_partial)
    columns: dict[str, pa.Array] = {}
    for fld in _OHLCV:
        if fld.name == "symbol":
            columns["symbol"] = pa.repeat(pa.scalar(_first(trades, "symbol") or ""), bars.height)
        elif fld.name == "venue":
            columns["venue"] = pa.repeat(
                pa.scalar(_first(trades, "venue"), pa.string()), bars.height
            )
        else:
            columns[fld.name] = bars[fld.name].to_arrow().cast(fld.type)
    table = pa.table(columns, schema=_OHLCV)
    if quotes is not None:
        for name in QUOTE_COLUMNS:
            table = table.append_column(name, bars[name].to_arrow().cast(pa.float64()))
    return table


def time_bars(
    trades: pa.Table, interval: str | int, *, quotes: pa.Table | None = None, fill: Fill = "skip"
) -> pa.Table:
    """Time bars of ``interval`` (``"1s"``, ``"1m"``, or ns); see :func:`make_bars`."""
    ns = parse_duration_ns(interval) if isinstance(interval, str) else interval
    return make_bars(trades, BarRule("time", ns), quotes=quotes, fill=fill)


def volume_bars(
    trades: pa.Table, size: float, *, quotes: pa.Table | None = None, keep_partial: bool = False
) -> pa.Table:
    """A bar every ``size`` units traded; see :func:`make_bars`."""
    return make_bars(trades, BarRule("volume", size), quotes=quotes, keep_partial=keep_partial)


def dollar_bars(
    trades: pa.Table, notional: float, *, quotes: pa.Table | None = None, keep_partial: bool = False
) -> pa.Table:
    """A bar every ``notional`` of ``price * size`` traded; see :func:`make_bars`."""
    return make_bars(trades, BarRule("dollar", notional), quotes=quotes, keep_partial=keep_partial)
