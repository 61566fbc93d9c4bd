"""Bars: time, volume and dollar bars against a slow per-row reference, and on real trades."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import ConfigError, SchemaError
from ticktensor.ingest import dollar_bars, make_bars, time_bars, volume_bars
from ticktensor.schemas import BarRule, EventKind, conform, schema_for, validate

BINANCE = (
    Path(__file__)
    .resolve()
    .parents[2]
    .parent.joinpath("shared/data/binance/btcusdt-trades.parquet")
)
TS = pa.timestamp("ns", tz="UTC")

Trade = tuple[int, float, float, int]
Quote = tuple[int, float, float, float, float]


def _trades_table(trades: list[Trade], symbol: str = "X") -> pa.Table:
    ts, price, size, side = (list(c) for c in zip(*trades, strict=True)) if trades else ([],) * 4
    return pa.table(
        {
            "ts_event": pa.array(ts, pa.int64()).cast(TS),
            "symbol": pa.array([symbol] * len(ts), pa.string()),
            "price": pa.array(price, pa.float64()),
            "size": pa.array(size, pa.float64()),
            "side": pa.array(side, pa.int8()),
        }
    )


def _quotes_table(quotes: list[Quote]) -> pa.Table:
    names = ("ts_event", "bid_px", "ask_px", "bid_sz", "ask_sz")
    columns: dict[str, Any] = {n: [q[k] for q in quotes] for k, n in enumerate(names)}
    columns["ts_event"] = pa.array(columns["ts_event"], pa.int64()).cast(TS)
    return pa.table(columns)


def _bar(group: list[Trade], open_ts: int, interval: int) -> dict[str, Any]:
    volume = sum(t[2] for t in group)
    dollar = sum(t[1] * t[2] for t in group)
    return {
        "ts_event": open_ts,
        "interval_ns": interval,
        "open": group[0][1],
        "high": max(t[1] for t in group),
        "low": min(t[1] for t in group),
        "close": group[-1][1],
        "volume": volume,
        "trade_count": len(group),
        "vwap": dollar / volume if volume > 0 else None,
    }


def ref_time_bars(trades: list[Trade], interval: int, fill: str) -> list[dict[str, Any]]:
    """One bar per epoch-aligned interval, straight from the definition."""
    groups: dict[int, list[Trade]] = {}
    for trade in trades:
        groups.setdefault(trade[0] - trade[0] % interval, []).append(trade)
    opens = sorted(groups)
    if fill == "ffill" and opens:
        opens = list(range(opens[0], opens[-1] + 1, interval))
    out: list[dict[str, Any]] = []
    for start in opens:
        if start in groups:
            out.append(_bar(groups[start], start, interval))
        else:
            close = out[-1]["close"]
            empty = dict.fromkeys(("open", "high", "low", "close"), close)
            out.append({**out[-1], **empty, "ts_event": start, "volume": 0.0, "trade_count": 0})
            out[-1]["vwap"] = None
    return out


def ref_threshold_bars(
    trades: list[Trade], kind: str, threshold: float, keep_partial: bool
) -> list[dict[str, Any]]:
    """A bar closes with the trade at which the running total reaches a multiple of N."""
    groups: dict[int, list[Trade]] = {}
    total = 0.0
    for trade in trades:
        groups.setdefault(math.floor(total / threshold), []).append(trade)
        total += trade[2] if kind == "volume" else trade[1] * trade[2]
    keys = sorted(groups)
    if keys and not keep_partial and total < (keys[-1] + 1) * threshold:
        keys = keys[:-1]
    out = []
    for key in keys:
        group = groups[key]
        out.append(_bar(group, group[0][0], group[-1][0] - group[0][0]))
    return out


def ref_quote_as_of(quotes: list[Quote], ts: int, strict: bool) -> tuple[float, ...]:
    seen = [q for q in quotes if (q[0] < ts if strict else q[0] <= ts)]
    return seen[-1][1:] if seen else (math.nan,) * 4


def _check(table: pa.Table, expected: list[dict[str, Any]]) -> None:
    assert table.schema.field("ts_event").type == TS
    got = table.to_pylist()
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        assert row["ts_event"].value == want["ts_event"]
        for key in ("interval_ns", "open", "high", "low", "close", "trade_count"):
            assert row[key] == want[key], key
        assert row["volume"] == pytest.approx(want["volume"], rel=1e-12)
        if want["vwap"] is None:
            assert row["vwap"] is None
        else:
            assert row["vwap"] == pytest.approx(want["vwap"], rel=1e-12)


ticks = st.integers(1, 40).map(lambda k: k * 0.25)  # binary fractions: sums are exact
trade_lists = st.lists(
    st.tuples(st.integers(0, 4_000), ticks, st.integers(0, 6).map(float), st.sampled_from([-1, 1])),
    max_size=40,
).map(lambda ts: sorted(((t * 1_000_000, p, s, d) for t, p, s, d in ts), key=lambda t: t[0]))
quote_lists = st.lists(
    st.tuples(
        st.integers(0, 4_000), ticks, st.integers(0, 5), st.integers(0, 9), st.integers(0, 9)
    ),
    min_size=1,
    max_size=20,
).map(
    lambda qs: sorted(
        ((t * 1_000_000, p, p + 0.25 * (1 + w), float(b), float(a)) for t, p, w, b, a in qs),
        key=lambda q: q[0],
    )
)


@settings(max_examples=60, deadline=None)
@given(
    trades=trade_lists,
    interval=st.sampled_from([10**6, 10**8, 10**9]),
    fill=st.sampled_from(["skip", "ffill"]),
)
def test_time_bars_match_reference(trades: list[Trade], interval: int, fill: str) -> None:
    bars = time_bars(_trades_table(trades), interval, fill=fill)  # type: ignore[arg-type]
    assert bars.schema.remove_metadata().equals(schema_for(EventKind.OHLCV).remove_metadata())
    _check(bars, ref_time_bars(trades, interval, fill))


@settings(max_examples=60, deadline=None)
@given(
    trades=trade_lists,
    kind=st.sampled_from(["volume", "dollar"]),
    threshold=st.sampled_from([1.0, 4.0, 7.5, 30.0]),
    keep_partial=st.booleans(),
)
def test_threshold_bars_match_reference(
    trades: list[Trade], kind: str, threshold: float, keep_partial: bool
) -> None:
    build = volume_bars if kind == "volume" else dollar_bars
    bars = build(_trades_table(trades), threshold, keep_partial=keep_partial)
    _check(bars, ref_threshold_bars(trades, kind, threshold, keep_partial))


@settings(max_examples=40, deadline=None)
@given(trades=trade_lists, quotes=quote_lists, rule=st.sampled_from(["1s", "100ms", "volume:5"]))
def test_quotes_as_of_bar_close(trades: list[Trade], quotes: list[Quote], rule: str) -> None:
    bars = make_bars(_trades_table(trades), rule, quotes=_quotes_table(quotes))
    assert bars.column_names[-4:] == ["bid_px", "ask_px", "bid_sz", "ask_sz"]
    for row in bars.to_pylist():
        start, length = row["ts_event"].value, row["interval_ns"]
        time_rule = not rule.startswith("volume")
        want = ref_quote_as_of(quotes, start + length, strict=time_rule)
        got = tuple(row[c] for c in ("bid_px", "ask_px", "bid_sz", "ask_sz"))
        np.testing.assert_array_equal(np.array(got, dtype=float), np.array(want))


def test_time_bars_fill_and_labels() -> None:
    trades = [(0, 10.0, 1.0, 1), (5, 12.0, 3.0, -1), (2_000_000_000, 11.0, 2.0, 1)]
    skip = time_bars(_trades_table(trades), "1s")
    assert pc.cast(skip.column("ts_event"), pa.int64()).to_pylist() == [0, 2_000_000_000]
    filled = time_bars(_trades_table(trades), "1s", fill="ffill").to_pylist()
    assert [r["volume"] for r in filled] == [4.0, 0.0, 2.0]
    assert filled[1]["open"] == filled[1]["close"] == filled[1]["low"] == 12.0
    assert filled[1]["vwap"] is None
    assert filled[1]["trade_count"] == 0


def test_errors() -> None:
    trades = _trades_table([(5, 1.0, 1.0, 1), (3, 1.0, 1.0, 1)])
    with pytest.raises(SchemaError, match=r"trades row 1: ts_event 3 is before row 0's 5"):
        time_bars(trades, "1s")
    with pytest.raises(ConfigError, match="fill must be 'skip' or 'ffill'"):
        time_bars(_trades_table([]), "1s", fill="zero")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="would emit 1,000,000,001 bars"):
        time_bars(_trades_table([(0, 1.0, 1.0, 1), (10**9, 1.0, 1.0, 1)]), 1, fill="ffill")
    with pytest.raises(ConfigError, match="bar rule 'tick:5'"):
        make_bars(_trades_table([]), "tick:5")
    with pytest.raises(ConfigError, match="volume threshold must be a number > 0"):
        make_bars(_trades_table([]), "volume:-1")
    two = pa.concat_tables(
        [_trades_table([(1, 1.0, 1.0, 1)]), _trades_table([(2, 1.0, 1.0, 1)], "Y")]
    )
    with pytest.raises(SchemaError, match="bars are per symbol"):
        time_bars(two, "1s")
    assert make_bars(_trades_table([]), BarRule("volume", 3.0)).num_rows == 0


def _binance_trades() -> pa.Table:
    raw = pq.read_table(BINANCE)
    buyer_maker = pc.equal(raw.column("buyer_maker"), "True")
    mapped = pa.table(
        {
            "ts_event": raw.column("timestamp"),
            "symbol": pa.array(["BTCUSDT"] * raw.num_rows),
            "venue": pa.array(["BINANCE"] * raw.num_rows),
            "price": raw.column("price"),
            "size": raw.column("quantity"),
            # Buyer is maker: the seller was the aggressor.
            "side": pc.if_else(buyer_maker, -1, 1).cast(pa.int8()),
            "trade_id": pc.cast(raw.column("trade_id"), pa.string()),
        }
    )
    return conform(mapped, EventKind.TRADES).sort_by("ts_event")


@pytest.mark.skipif(not BINANCE.exists(), reason="shared sample data not present")
def test_real_binance_trades_to_1s_bars() -> None:
    trades = _binance_trades()
    bars = time_bars(trades, "1s")
    assert validate(bars, EventKind.OHLCV).ok
    assert sum(bars.column("trade_count").to_pylist()) == trades.num_rows
    assert pc.sum(bars.column("volume")).as_py() == pytest.approx(
        pc.sum(trades.column("size")).as_py()
    )
    rows = list(
        zip(
            pc.cast(trades.column("ts_event"), pa.int64()).to_pylist(),
            trades.column("price").to_pylist(),
            trades.column("size").to_pylist(),
            trades.column("side").to_pylist(),
            strict=True,
        )
    )
    _check(bars, ref_time_bars(rows, 1_000_000_000, "skip"))
    assert set(bars.column("symbol").to_pylist()) == {"BTCUSDT"}
