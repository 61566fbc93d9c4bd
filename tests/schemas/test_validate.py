"""The validator: one test per rule, plus the ValidationResult API."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from ticktensor.errors import ConfigError, SchemaError, ValidationError
from ticktensor.schemas import RULES, VIOLATION_SCHEMA, Violation, validate

NAN, INF = math.nan, math.inf


def _table(base: dict[str, list[Any]], **overrides: list[Any]) -> pa.Table:
    return pa.table({**base, **overrides})


def trades(**overrides: list[Any]) -> pa.Table:
    base: dict[str, list[Any]] = {
        "ts_event": [1, 2, 3],
        "symbol": ["X", "X", "X"],
        "price": [10.0, 10.5, 10.25],
        "size": [1.0, 2.0, 0.5],
        "side": [1, -1, 0],
    }
    return _table(base, **overrides)


def quotes(**overrides: list[Any]) -> pa.Table:
    base: dict[str, list[Any]] = {
        "ts_event": [1, 2, 3],
        "symbol": ["X", "X", "X"],
        "bid_px": [10.0, 10.0, None],
        "ask_px": [10.5, 10.0, 10.5],
        "bid_sz": [1.0, 2.0, None],
        "ask_sz": [3.0, 4.0, 5.0],
    }
    return _table(base, **overrides)


def mbp10(**overrides: list[Any]) -> pa.Table:
    base: dict[str, list[Any]] = {
        "ts_event": [1, 2],
        "symbol": ["X", "X"],
        "action": ["A", "T"],
        "side": [1, -1],
        "price": [9.9, 10.0],
        "size": [1.0, 1.0],
    }
    for i in range(10):
        base[f"bid_px_{i:02d}"] = [10.0 - i, 10.0 - i]
        base[f"ask_px_{i:02d}"] = [11.0 + i, 11.0 + i]
        base[f"bid_sz_{i:02d}"] = [1.0, 1.0]
        base[f"ask_sz_{i:02d}"] = [1.0, 1.0]
    return _table(base, **overrides)


def mbo(**overrides: list[Any]) -> pa.Table:
    base: dict[str, list[Any]] = {
        "ts_event": [1, 2, 3],
        "symbol": ["X", "X", "X"],
        "order_id": [7, 7, 0],
        "action": ["A", "C", "R"],
        "side": [1, 1, 0],
        "price": [10.0, 10.0, None],
        "size": [5.0, 0.0, 0.0],
    }
    return _table(base, **overrides)


def ohlcv(**overrides: list[Any]) -> pa.Table:
    base: dict[str, list[Any]] = {
        "ts_event": [0, 60],
        "symbol": ["X", "X"],
        "interval_ns": [60, 60],
        "open": [10.0, 11.0],
        "high": [12.0, 11.0],
        "low": [9.0, 10.0],
        "close": [11.0, 10.0],
        "volume": [5.0, 0.0],
    }
    return _table(base, **overrides)


def flagged(table: pa.Table, kind: str, **kwargs: Any) -> list[tuple[int, str, str, str]]:
    result = validate(table, kind, **kwargs)
    return [(v.row, v.column, v.value, v.rule) for v in result]


@pytest.mark.parametrize(
    ("kind", "table"),
    [
        ("trades", trades()),
        ("quotes", quotes()),
        ("mbp10", mbp10()),
        ("mbo", mbo()),
        ("ohlcv", ohlcv()),
    ],
)
def test_clean_tables_are_ok(kind: str, table: pa.Table) -> None:
    result = validate(table, kind, ts_range=(0, 100))
    assert result.ok, result.violations.to_pylist()
    assert result.violations.schema == VIOLATION_SCHEMA
    assert result.bad_rows().tolist() == []
    assert result.valid_mask().tolist() == [True] * table.num_rows
    result.raise_first("clean.parquet")  # no error


def test_not_null() -> None:
    table = trades(symbol=["X", None, "X"], price=[None, 1.0, 1.0])
    assert flagged(table, "trades") == [
        (0, "price", "null", "not_null"),
        (1, "symbol", "null", "not_null"),
    ]
    assert next(iter(validate(table, "trades"))).message.startswith("row 0: price is null (rule")


def test_finite() -> None:
    table = trades(price=[10.0, NAN, 10.0], size=[INF, 1.0, 1.0])
    assert flagged(table, "trades") == [(0, "size", "inf", "finite"), (1, "price", "nan", "finite")]


def test_positive_price() -> None:
    assert flagged(trades(price=[10.0, -3.5, 0.0]), "trades") == [
        (1, "price", "-3.5", "positive_price"),
        (2, "price", "0", "positive_price"),
    ]
    assert flagged(quotes(ask_px=[10.5, 10.0, -1.0]), "quotes") == [
        (2, "ask_px", "-1", "positive_price"),
    ]
    # MBO: a clear has no price (null), which is fine.
    assert flagged(mbo(price=[10.0, 0.0, None]), "mbo") == [(1, "price", "0", "positive_price")]


def test_non_negative_size() -> None:
    assert flagged(trades(size=[1.0, -2.0, 0.0]), "trades") == [
        (1, "size", "-2", "non_negative_size"),
        (2, "size", "0", "positive_trade_size"),  # a trade of nothing did not happen
    ]
    assert flagged(quotes(bid_sz=[1.0, 0.0, 2.0]), "quotes") == []  # an empty level is fine
    assert flagged(mbp10(bid_sz_03=[1.0, -1.0]), "mbp10") == [
        (1, "bid_sz_03", "-1", "non_negative_size"),
    ]


def test_side_domain() -> None:
    assert flagged(trades(side=[1, 2, -2]), "trades") == [
        (1, "side", "2", "side_domain"),
        (2, "side", "-2", "side_domain"),
    ]


def test_action_domain() -> None:
    assert flagged(mbo(action=["A", "X", "AA"]), "mbo") == [
        (1, "action", "X", "action_domain"),
        (2, "action", "AA", "action_domain"),
    ]


def test_crossed_book_quotes_locked_is_allowed() -> None:
    table = quotes(bid_px=[10.6, 10.0, None])  # row 1 is locked (equal), row 2 one-sided
    assert flagged(table, "quotes") == [(0, "bid_px", "10.6", "crossed_book")]
    message = next(iter(validate(table, "quotes"))).message
    assert message.startswith("row 0: bid_px 10.6 is above ask_px 10.5 (rule crossed_book:")


def test_crossed_book_mbp10_level_zero() -> None:
    assert flagged(mbp10(bid_px_00=[10.0, 11.5]), "mbp10") == [
        (1, "bid_px_00", "11.5", "crossed_book"),
    ]


def test_level_order() -> None:
    table = mbp10(
        bid_px_02=[8.0, 9.5],  # row 1: level 2 above level 1 (9.0)
        ask_px_04=[None, 15.0],  # row 0: empty level is skipped ...
        ask_px_05=[14.5, 16.0],  # ... so level 5 (14.5) is compared with level 3 (14.0): fine
        ask_px_06=[14.0, 17.0],  # row 0: 14.0 below level 5 (14.5)
    )
    assert flagged(table, "mbp10") == [
        (0, "ask_px_06", "14", "level_order"),
        (1, "bid_px_02", "9.5", "level_order"),
    ]
    message = next(iter(validate(table, "mbp10"))).message
    assert "ask_px_06 14 is below the shallower ask level 14.5" in message


def test_ohlc_range() -> None:
    table = ohlcv(low=[10.5, 10.0], high=[12.0, 10.5])
    assert flagged(table, "ohlcv") == [
        (0, "low", "10.5", "ohlc_range"),
        (1, "high", "10.5", "ohlc_range"),
    ]
    # low > high needs no rule of its own: it always breaks one of the two bounds.
    assert flagged(ohlcv(low=[9.0, 12.0]), "ohlcv") == [(1, "low", "12", "ohlc_range")]


def test_ts_range() -> None:
    assert flagged(trades(ts_event=[5, 10, 20]), "trades", ts_range=(10, 20)) == [
        (0, "ts_event", "1970-01-01 00:00:00.000000005Z", "ts_range"),
        (2, "ts_event", "1970-01-01 00:00:00.000000020Z", "ts_range"),
    ]
    with pytest.raises(ConfigError, match="ts_range start 20 must be before end 10"):
        validate(trades(), "trades", ts_range=(20, 10))


def test_duplicate_flags_later_occurrences_only() -> None:
    table = trades(ts_event=[1, 1, 1], price=[NAN, NAN, 1.0], size=[1.0, 1.0, 1.0], side=[1, 1, 1])
    got = flagged(table, "trades")
    assert (1, "*", "0", "duplicate") in got
    assert [r for r in got if r[3] == "duplicate"] == [(1, "*", "0", "duplicate")]
    assert flagged(table, "trades", check_duplicates=False) == [
        (0, "price", "nan", "finite"),
        (1, "price", "nan", "finite"),
    ]


def test_result_api_and_raise_first() -> None:
    table = trades(price=[10.0, -3.5, -1.0], side=[1, 5, 1])
    result = validate(table, "trades")
    assert not result.ok
    assert len(result) == 3
    assert result.n_rows == 3
    assert result.bad_rows().dtype == np.int64
    assert result.bad_rows().tolist() == [1, 2]
    assert result.valid_mask().tolist() == [True, False, False]
    assert result.counts() == {"positive_price": 2, "side_domain": 1}
    first = next(iter(result))
    assert isinstance(first, Violation)
    assert first.message == (
        f"row 1: price -3.5 is not positive (rule positive_price: {RULES['positive_price']})"
    )
    with pytest.raises(ValidationError) as info:
        result.raise_first("trades.csv")
    assert str(info.value).startswith("trades.csv row 1: price -3.5 is not positive")
    assert "[and 2 more violation(s) in 2 row(s)]" in str(info.value)


def test_every_rule_has_a_description() -> None:
    assert set(RULES) == {
        "not_null",
        "finite",
        "positive_price",
        "non_negative_size",
        "positive_trade_size",
        "side_domain",
        "action_domain",
        "crossed_book",
        "level_order",
        "ohlc_range",
        "ts_range",
        "duplicate",
    }
    assert all(text for text in RULES.values())


def test_missing_column_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="missing required column 'side'"):
        validate(trades().drop(["side"]), "trades")


def test_empty_table_is_ok() -> None:
    assert validate(trades().slice(0, 0), "trades").ok
