"""Validation rules: each one a stable name, a human text and a vectorized row check."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ._events import ACTIONS, MBP_DEPTH, EventKind, schema_for

__all__ = ["RULES", "Check", "run_checks"]

RULES: dict[str, str] = {
    "not_null": "a required field must not be null (nor, for text, empty)",
    "finite": "prices and sizes must not be NaN or infinite",
    "positive_price": "a price, where present, must be > 0",
    "non_negative_size": "a size, where present, must be >= 0",
    "positive_trade_size": "a trade's size must be > 0 (a trade of nothing did not happen)",
    "side_domain": "side must be one of -1 (sell/ask), 0 (none), +1 (buy/bid)",
    "action_domain": "action must be one of " + ", ".join(ACTIONS),
    "crossed_book": "best bid must not exceed best ask (locked, equal, is allowed)",
    "level_order": "bid prices must not increase and ask prices must not decrease with depth",
    "ohlc_range": "low <= min(open, close) and high >= max(open, close)",
    "ts_range": "ts_event must lie in the declared [start, end) range",
    "duplicate": "a row must not repeat an earlier row in every column",
}
"""Every rule the validator applies, by stable name, with what it requires."""

_PRICES: dict[EventKind, tuple[str, ...]] = {
    EventKind.TRADES: ("price",),
    EventKind.QUOTES: ("bid_px", "ask_px"),
    EventKind.MBP10: (
        "price",
        *(f"{s}_px_{i:02d}" for s in ("bid", "ask") for i in range(MBP_DEPTH)),
    ),
    EventKind.MBO: ("price",),
    EventKind.OHLCV: ("open", "high", "low", "close", "vwap"),
    # Strikes, limits, settlements and net changes of spreads may be negative or zero.
    EventKind.DEFINITIONS: ("min_price_increment",),
    EventKind.STATISTICS: (),
}
_SIZES: dict[EventKind, tuple[str, ...]] = {
    EventKind.TRADES: ("size",),
    EventKind.QUOTES: ("bid_sz", "ask_sz"),
    EventKind.MBP10: (
        "size",
        *(f"{s}_sz_{i:02d}" for s in ("bid", "ask") for i in range(MBP_DEPTH)),
    ),
    EventKind.MBO: ("size",),
    EventKind.OHLCV: ("volume",),
    EventKind.DEFINITIONS: ("unit_of_measure_qty",),
    EventKind.STATISTICS: ("quantity",),
}


@dataclass(frozen=True)
class Check:
    """Rows of one column that broke one rule, with the text around their value.

    The message of a flagged row reads ``"row {row}: {before}{value}{after}{other}"``,
    where ``other`` is the value of a reference column in that row (e.g. the best ask
    a bid crossed); ``{value}`` is left out when ``show_value`` is false.
    """

    rule: str
    column: str
    rows: npt.NDArray[np.int64]
    values: pa.Array
    before: str
    after: str
    other: pa.Array | None = None
    show_value: bool = True


def _mask(expr: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.bool_]:
    return np.asarray(pc.fill_null(expr, False).to_numpy(zero_copy_only=False), dtype=bool)


def _outside(column: pa.ChunkedArray, allowed: pa.Array) -> pa.ChunkedArray:
    # is_in says False (not null) for a null; nulls belong to not_null, not here.
    return pc.and_(pc.invert(pc.is_in(column, allowed)), pc.is_valid(column))


def _text(column: pa.ChunkedArray, rows: npt.NDArray[np.int64]) -> pa.Array:
    return pc.fill_null(pc.cast(column.take(rows), pa.string()), "null").combine_chunks()


def _check(
    rule: str,
    table: pa.Table,
    column: str,
    bad: pa.ChunkedArray | pa.Array,
    before: str,
    after: str = "",
    *,
    other: pa.ChunkedArray | None = None,
    show_value: bool = True,
) -> Iterator[Check]:
    if not pc.any(bad).as_py():
        return  # the usual case: no violation, and no Arrow-to-numpy mask to build
    rows = np.flatnonzero(_mask(bad)).astype(np.int64)
    if rows.size == 0:
        return
    values = _text(table.column(column), rows)
    other_text = None if other is None else _text(other, rows)
    yield Check(rule, column, rows, values, before, after, other_text, show_value)


def run_checks(
    table: pa.Table, kind: EventKind, ts_range: tuple[int, int] | None, check_duplicates: bool
) -> Iterator[Check]:
    """Yield the violations of every rule on a table cast by ``cast_columns``.

    Rules run in ``RULES`` order, columns in schema order, so that sorting the
    result stably by row gives a deterministic report.
    """
    schema = schema_for(kind)
    for field in schema:
        if not field.nullable:
            bad = pc.is_null(table.column(field.name))
            yield from _check(
                "not_null", table, field.name, bad, f"{field.name} is null", show_value=False
            )
            if pa.types.is_string(field.type):  # an empty symbol names nothing
                empty = pc.equal(table.column(field.name), "")
                yield from _check(
                    "not_null", table, field.name, empty, f"{field.name} is empty", show_value=False
                )
    for field in schema:
        if pa.types.is_floating(field.type):
            col = table.column(field.name)
            bad = pc.or_(pc.is_nan(col), pc.is_inf(col))
            yield from _check("finite", table, field.name, bad, f"{field.name} ", " is not finite")
    for name in _PRICES[kind]:
        bad = pc.less_equal(table.column(name), 0)
        yield from _check("positive_price", table, name, bad, f"{name} ", " is not positive")
    for name in _SIZES[kind]:
        bad = pc.less(table.column(name), 0)
        yield from _check("non_negative_size", table, name, bad, f"{name} ", " is negative")
    if kind is EventKind.TRADES:
        bad = pc.equal(table.column("size"), 0)
        yield from _check(
            "positive_trade_size", table, "size", bad, "size ", " is zero: no quantity traded"
        )
    if "side" in schema.names:
        bad = _outside(table.column("side"), pa.array([-1, 0, 1], pa.int8()))
        yield from _check("side_domain", table, "side", bad, "side ", " is not one of -1, 0, 1")
    if "action" in schema.names:
        bad = _outside(table.column("action"), pa.array(list(ACTIONS)))
        codes = ", ".join(ACTIONS)
        yield from _check(
            "action_domain", table, "action", bad, "action ", f" is not one of {codes}"
        )
    yield from _book_checks(table, kind)
    if kind is EventKind.OHLCV:
        yield from _ohlc_checks(table)
    if ts_range is not None:
        start, end = ts_range
        ts = pc.cast(table.column("ts_event"), pa.int64())
        bad = pc.or_(pc.less(ts, start), pc.greater_equal(ts, end))
        yield from _check(
            "ts_range", table, "ts_event", bad, "ts_event ", f" is outside [{start}, {end}) ns"
        )
    if check_duplicates and table.num_rows > 1:
        yield from _duplicates(table)


def _book_checks(table: pa.Table, kind: EventKind) -> Iterator[Check]:
    if kind not in (EventKind.QUOTES, EventKind.MBP10):
        return
    bid, ask = ("bid_px", "ask_px") if kind is EventKind.QUOTES else ("bid_px_00", "ask_px_00")
    bad = pc.greater(table.column(bid), table.column(ask))
    yield from _check(
        "crossed_book", table, bid, bad, f"{bid} ", f" is above {ask} ", other=table.column(ask)
    )
    if kind is not EventKind.MBP10:
        return
    for side, worse, word in (("bid", pc.greater, "above"), ("ask", pc.less, "below")):
        # Compare each level with the last *present* shallower level: empty levels
        # (nulls) are skipped rather than breaking the chain.
        prev = table.column(f"{side}_px_00")
        for level in range(1, MBP_DEPTH):
            name = f"{side}_px_{level:02d}"
            cur = table.column(name)
            yield from _check(
                "level_order",
                table,
                name,
                worse(cur, prev),
                f"{name} ",
                f" is {word} the shallower {side} level ",
                other=prev,
            )
            prev = pc.if_else(pc.is_null(cur), prev, cur)


def _ohlc_checks(table: pa.Table) -> Iterator[Check]:
    # low > high needs no check of its own: it implies one of these two.
    open_, close = table.column("open"), table.column("close")
    lo, hi = pc.min_element_wise(open_, close), pc.max_element_wise(open_, close)
    yield from _check(
        "ohlc_range",
        table,
        "low",
        pc.greater(table.column("low"), lo),
        "low ",
        " is above min(open, close) ",
        other=lo,
    )
    yield from _check(
        "ohlc_range",
        table,
        "high",
        pc.less(table.column("high"), hi),
        "high ",
        " is below max(open, close) ",
        other=hi,
    )


def _duplicates(table: pa.Table) -> Iterator[Check]:
    # Nulls equal nulls and NaN equals NaN here, as a reader of the rows would expect.
    first = (
        pl.DataFrame(table)
        .with_row_index("__row")
        .select(pl.col("__row").first().over(table.column_names))
        .to_series()
        .to_numpy()
        .astype(np.int64)
    )
    rows = np.flatnonzero(first != np.arange(table.num_rows)).astype(np.int64)
    if rows.size == 0:
        return
    values = pa.array(first[rows]).cast(pa.string())
    yield Check("duplicate", "*", rows, values, "identical in every column to row ", "")
