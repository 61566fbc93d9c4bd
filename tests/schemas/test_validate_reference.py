"""The vectorized validator against a slow, obviously correct per-row reference."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.schemas import validate

PRICES = [1.0, 1.5, 2.0, 0.0, -1.0, math.nan, math.inf, -math.inf, None]
SIZES = [0.0, 1.0, 2.5, -1.0, math.nan, math.inf, None]
TS_RANGE = (1, 4)

COLUMNS = {
    "trades": ["ts_event", "symbol", "price", "size", "side"],
    "quotes": ["ts_event", "symbol", "bid_px", "ask_px", "bid_sz", "ask_sz"],
}
Row = dict[str, Any]
Finding = tuple[int, str, str]  # (row, column, rule)


def _is_num(x: Any) -> bool:
    return x is not None and not math.isnan(x)


def _reference(rows: list[Row], kind: str, ts_range: tuple[int, int] | None) -> set[Finding]:
    required = ["ts_event", "symbol"] + (["price", "size", "side"] if kind == "trades" else [])
    floats = ["price", "size"] if kind == "trades" else ["bid_px", "ask_px", "bid_sz", "ask_sz"]
    prices = ["price"] if kind == "trades" else ["bid_px", "ask_px"]
    sizes = ["size"] if kind == "trades" else ["bid_sz", "ask_sz"]
    out: set[Finding] = set()
    seen: set[tuple[Any, ...]] = set()
    for i, row in enumerate(rows):
        for col in required:
            if row[col] is None:
                out.add((i, col, "not_null"))
        for col in floats:
            if row[col] is not None and (math.isnan(row[col]) or math.isinf(row[col])):
                out.add((i, col, "finite"))
        for col in prices:
            if _is_num(row[col]) and row[col] <= 0:
                out.add((i, col, "positive_price"))
        for col in sizes:
            if _is_num(row[col]) and row[col] < 0:
                out.add((i, col, "non_negative_size"))
        if kind == "trades" and _is_num(row["size"]) and row["size"] == 0:
            out.add((i, "size", "positive_trade_size"))
        if kind == "trades" and row["side"] is not None and row["side"] not in (-1, 0, 1):
            out.add((i, "side", "side_domain"))
        crossable = kind == "quotes" and _is_num(row["bid_px"]) and _is_num(row["ask_px"])
        if crossable and row["bid_px"] > row["ask_px"]:
            out.add((i, "bid_px", "crossed_book"))
        ts = row["ts_event"]
        if ts_range is not None and ts is not None and not ts_range[0] <= ts < ts_range[1]:
            out.add((i, "ts_event", "ts_range"))
        values = [row[name] for name in COLUMNS[kind]]
        key = tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in values)
        if key in seen:
            out.add((i, "*", "duplicate"))
        seen.add(key)
    return out


def _common() -> dict[str, st.SearchStrategy[Any]]:
    return {
        "ts_event": st.sampled_from([0, 1, 2, 3, 4, 5, None]),
        "symbol": st.sampled_from(["A", "B", None]),
    }


trade_rows = st.fixed_dictionaries(
    {
        **_common(),
        "price": st.sampled_from(PRICES),
        "size": st.sampled_from(SIZES),
        "side": st.sampled_from([-2, -1, 0, 1, 2, None]),
    }
)
quote_rows = st.fixed_dictionaries(
    {
        **_common(),
        "bid_px": st.sampled_from(PRICES),
        "ask_px": st.sampled_from(PRICES),
        "bid_sz": st.sampled_from(SIZES),
        "ask_sz": st.sampled_from(SIZES),
    }
)


TYPES = {"ts_event": pa.int64(), "symbol": pa.string(), "side": pa.int64()}


def _table(rows: list[Row], kind: str) -> pa.Table:
    return pa.table(
        {n: pa.array([r[n] for r in rows], TYPES.get(n, pa.float64())) for n in COLUMNS[kind]}
    )


def _vectorized(rows: list[Row], kind: str, ts_range: tuple[int, int] | None) -> set[Finding]:
    result = validate(_table(rows, kind), kind, ts_range=ts_range)
    return {(v.row, v.column, v.rule) for v in result}


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(trade_rows, max_size=25), use_range=st.booleans())
def test_trades_match_reference(rows: list[Row], use_range: bool) -> None:
    ts_range = TS_RANGE if use_range else None
    assert _vectorized(rows, "trades", ts_range) == _reference(rows, "trades", ts_range)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(quote_rows, max_size=25), use_range=st.booleans())
def test_quotes_match_reference(rows: list[Row], use_range: bool) -> None:
    ts_range = TS_RANGE if use_range else None
    assert _vectorized(rows, "quotes", ts_range) == _reference(rows, "quotes", ts_range)
