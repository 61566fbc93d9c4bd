"""Features: each clock and feature against a per-row reference; point in time, labels, stats."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ticktensor.errors import ConfigError, SchemaError
from ticktensor.ingest import (
    DEMO_FEATURE_SPEC,
    FEATURES,
    FeatureStatsAccumulator,
    SyntheticMarket,
    build_features,
    compute_features,
    default_spec,
    demo_feature_spec,
    dump_spec,
    generate_day,
    known_features,
    load_spec,
    make_bars,
)
from ticktensor.schemas import EventKind, FeatureSpec, LabelSpec, conform, schema_for

EXAMPLE = Path(__file__).parents[2] / "examples" / "features.toml"
BINANCE = (
    Path(__file__)
    .resolve()
    .parents[2]
    .parent.joinpath("shared/data/binance/btcusdt-trades.parquet")
)

MARKET = SyntheticMarket(
    symbols=("X",),
    start=date(2024, 5, 6),
    quotes_per_day=400,
    trades_per_day=300,
    intraday_shape=0.0,
    seed=3,
)
DAY = generate_day(MARKET, "X", MARKET.days[0])
QUOTES, TRADES = DAY[EventKind.QUOTES], DAY[EventKind.TRADES]


def _col(table: pa.Table, name: str) -> list[float]:
    if name == "ts_event":
        return [float(v) for v in table.column(name).cast(pa.int64()).to_pylist()]
    return [float(v) for v in table.column(name).to_pylist()]


def _reference_features(quotes: pa.Table, trades: pa.Table) -> np.ndarray:
    """Row by row, in plain Python, straight from the documented definitions."""
    qts = [int(t) for t in _col(quotes, "ts_event")]
    bid, ask = _col(quotes, "bid_px"), _col(quotes, "ask_px")
    bsz, asz = _col(quotes, "bid_sz"), _col(quotes, "ask_sz")
    tts = [int(t) for t in _col(trades, "ts_event")]
    signed = [s * z for s, z in zip(_col(trades, "side"), _col(trades, "size"), strict=True)]
    rows = []
    for i, ts in enumerate(qts):
        mid = (bid[i] + ask[i]) / 2
        prev_mid = (bid[i - 1] + ask[i - 1]) / 2 if i else mid
        known = [k for k, t in enumerate(tts) if t <= ts]
        recent = [k for k in known if tts[k] > ts - 1_000_000_000]
        rows.append(
            [
                math.log(mid / prev_mid),
                (ask[i] - bid[i]) / mid * 1e4,
                (bsz[i] - asz[i]) / (bsz[i] + asz[i]),
                math.log1p(bsz[i]),
                math.log1p(asz[i]),
                (ts % 86_400_000_000_000) / 86_400_000_000_000,
                signed[known[-1]] if known else 0.0,
                float(len(recent)),
            ]
        )
    return np.array(rows)


def test_shapes_names_and_dtypes() -> None:
    out = build_features(QUOTES, TRADES)
    ts, values, labels, feature_names, label_names = out
    assert values.shape == (QUOTES.num_rows, len(FEATURES))
    assert labels.shape == (QUOTES.num_rows, 1)
    assert (ts.dtype, values.dtype, labels.dtype) == (np.int64, np.float32, np.float32)
    assert feature_names == FEATURES == DEMO_FEATURE_SPEC.features
    assert label_names == ("mid_fwd_log_return_10",)
    np.testing.assert_array_equal(ts, QUOTES.column("ts_event").cast(pa.int64()).to_numpy())


def test_features_match_the_reference() -> None:
    out = build_features(QUOTES, TRADES)
    expected = _reference_features(QUOTES, TRADES)
    np.testing.assert_allclose(out.values, expected.astype(np.float32), rtol=1e-6, atol=1e-9)
    assert out.values[0, 0] == 0.0, "no return for the first row"


@pytest.mark.parametrize("horizon", [1, 10, 57])
def test_row_horizon_labels_match_reference(horizon: int) -> None:
    out = build_features(QUOTES, TRADES, demo_feature_spec(horizon))
    mid = [(b + a) / 2 for b, a in zip(_col(QUOTES, "bid_px"), _col(QUOTES, "ask_px"), strict=True)]
    n = len(mid)
    expected = [
        math.log(mid[i + horizon] / mid[i]) if i + horizon < n else math.nan for i in range(n)
    ]
    np.testing.assert_allclose(out.labels[:, 0], np.array(expected, dtype=np.float32), rtol=1e-6)
    assert np.isnan(out.labels[-horizon:, 0]).all()
    assert not np.isnan(out.labels[:-horizon, 0]).any()


def test_other_label_kinds_and_time_horizons() -> None:
    h_ns = 30 * 1_000_000_000
    spec = FeatureSpec(
        ("spread_bps",),
        (
            LabelSpec("ret", "mid", "forward_return", horizon_rows=3),
            LabelSpec("ask_later", "ask_px", "forward_value", horizon_rows=2),
            LabelSpec("ret_30s", "bid_px", "forward_log_return", horizon_ns=h_ns),
        ),
    )
    out = build_features(QUOTES, None, spec)
    assert out.values.shape == (QUOTES.num_rows, 1)
    bid, ask = _col(QUOTES, "bid_px"), _col(QUOTES, "ask_px")
    ts = [int(t) for t in _col(QUOTES, "ts_event")]
    n = len(ts)
    mid = [(b + a) / 2 for b, a in zip(bid, ask, strict=True)]
    ret = [mid[i + 3] / mid[i] - 1 if i + 3 < n else math.nan for i in range(n)]
    later = [ask[i + 2] if i + 2 < n else math.nan for i in range(n)]
    timed = []
    for i in range(n):
        if ts[i] + h_ns > ts[-1]:
            timed.append(math.nan)
            continue
        j = max(k for k in range(n) if ts[k] <= ts[i] + h_ns)
        timed.append(math.log(bid[j] / bid[i]))
    expected = np.array([ret, later, timed], dtype=np.float32).T
    np.testing.assert_allclose(out.labels, expected, rtol=1e-6, atol=1e-9)


def test_without_trades_the_trade_features_are_zero() -> None:
    out = build_features(QUOTES)
    assert not out.values[:, 6:].any()
    empty = build_features(QUOTES, TRADES.slice(0, 0))
    np.testing.assert_array_equal(out.values, empty.values)


def test_feature_subset_and_order_follow_the_spec() -> None:
    spec = FeatureSpec(("imbalance", "spread_bps"))
    out = build_features(QUOTES, TRADES, spec)
    full = build_features(QUOTES, TRADES)
    np.testing.assert_array_equal(out.values, full.values[:, [2, 1]])
    assert out.labels.shape == (QUOTES.num_rows, 0)


def test_errors() -> None:
    with pytest.raises(ConfigError, match=r"unknown feature\(s\) \['vpin'\]"):
        build_features(QUOTES, TRADES, FeatureSpec(("vpin",)))
    bad_label = FeatureSpec(("imbalance",), (LabelSpec("y", "close", horizon_rows=1),))
    with pytest.raises(ConfigError, match=r"unknown label source\(s\) \['close'\]"):
        build_features(QUOTES, TRADES, bad_label)
    shuffled = QUOTES.take([0, 2, 1, *range(3, QUOTES.num_rows)])
    with pytest.raises(SchemaError, match=r"quotes row 2: ts_event \d+ is before row 1's"):
        build_features(shuffled, TRADES)


def test_empty_quotes() -> None:
    out = build_features(QUOTES.slice(0, 0), TRADES)
    assert out.values.shape == (0, len(FEATURES))
    assert out.labels.shape == (0, 1)


def _perturb_after(
    table: pa.Table, cut: int, rng: np.random.Generator, columns: list[str]
) -> pa.Table:
    """Replace the given columns' values in rows stamped strictly after ``cut``."""
    future = table.column("ts_event").cast(pa.int64()).to_numpy() > cut
    for name in columns:
        values = table.column(name).to_numpy().copy()
        noise = rng.integers(1, 50, future.sum())
        values[future] = np.where(values[future] < 0, -1, 1) * noise if name == "side" else noise
        index = table.schema.get_field_index(name)
        table = table.set_column(index, table.schema.field(name), pa.array(values))
    return table


@settings(max_examples=40, deadline=None)
@given(cut_row=st.integers(0, QUOTES.num_rows - 1), seed=st.integers(0, 2**32 - 1))
def test_point_in_time(cut_row: int, seed: int) -> None:
    """Changing anything stamped after row i's time leaves rows up to that time as they were."""
    rng = np.random.default_rng(seed)
    cut = int(QUOTES.column("ts_event").cast(pa.int64()).to_numpy()[cut_row])
    quotes = _perturb_after(QUOTES, cut, rng, ["bid_sz", "ask_sz"])
    ask = quotes.column("ask_px").to_numpy().copy()
    future = quotes.column("ts_event").cast(pa.int64()).to_numpy() > cut
    ask[future] += rng.integers(0, 5, future.sum()) * MARKET.tick_size
    quotes = quotes.set_column(quotes.schema.get_field_index("ask_px"), "ask_px", pa.array(ask))
    trades = _perturb_after(TRADES, cut, rng, ["size", "side"])
    # Extra trades in the future, too.
    extra_ts = np.sort(rng.integers(cut + 1, cut + 10**10, 5))
    extra = pa.table(
        {
            "ts_event": pa.array(extra_ts).cast(pa.timestamp("ns", tz="UTC")),
            "side": pa.array([1] * 5, pa.int8()),
            "size": [7.0] * 5,
        }
    )
    head = trades.select(["ts_event", "side", "size"])
    trades = pa.concat_tables([head, extra.cast(head.schema)])
    trades = trades.sort_by("ts_event")

    before = build_features(QUOTES, TRADES)
    after = build_features(quotes, trades)
    known = before.ts <= cut
    np.testing.assert_array_equal(after.values[known], before.values[known])


# ---------------------------------------------------------------------------------------
# The engine: every clock and feature against a slow per-row reference.
# ---------------------------------------------------------------------------------------

TS_TYPE = pa.timestamp("ns", tz="UTC")
QUANTITIES = ("volume", "dollar_volume", "trade_count", "signed_volume")
DURATION = re.compile(r"(\d+)(ms|s)")


def _ts_array(values: list[int]) -> pa.Array:
    return pa.array(values, pa.int64()).cast(TS_TYPE)


def _trades(rows: list[tuple[int, float, float, int]]) -> pa.Table:
    return pa.table(
        {
            "ts_event": _ts_array([r[0] for r in rows]),
            "symbol": pa.array(["X"] * len(rows), pa.string()),
            "price": pa.array([r[1] for r in rows], pa.float64()),
            "size": pa.array([r[2] for r in rows], pa.float64()),
            "side": pa.array([r[3] for r in rows], pa.int8()),
        }
    )


def _quotes(rows: list[tuple[int, float, float, float, float]]) -> pa.Table:
    names = ("bid_px", "ask_px", "bid_sz", "ask_sz")
    columns = {n: pa.array([r[k + 1] for r in rows], pa.float64()) for k, n in enumerate(names)}
    return pa.table({"ts_event": _ts_array([r[0] for r in rows]), **columns})


def _mbp10(rows: list[tuple[int, float, float, float, float]], depth: int) -> pa.Table:
    """A book whose level k sits k ticks behind the top; levels past ``depth`` are empty."""
    columns: dict[str, Any] = {"ts_event": _ts_array([r[0] for r in rows])}
    for level in range(10):
        live = level < depth
        columns[f"bid_px_{level:02d}"] = [r[1] - 0.25 * level if live else None for r in rows]
        columns[f"ask_px_{level:02d}"] = [r[2] + 0.25 * level if live else None for r in rows]
        columns[f"bid_sz_{level:02d}"] = [r[3] + level if live else None for r in rows]
        columns[f"ask_sz_{level:02d}"] = [r[4] + 2 * level if live else None for r in rows]
    return pa.table(
        {k: pa.array(v, pa.float64()) if k != "ts_event" else v for k, v in columns.items()}
    )


def _ints(column: pa.ChunkedArray) -> list[int]:
    return [int(v) for v in column.cast(pa.int64()).to_pylist()]


@dataclass
class Ref:
    """Row-by-row state of one clock, built with plain loops from the documented rules."""

    ts: list[int]
    col: dict[str, list[float]]
    atoms: list[tuple[int, int, dict[str, float]]]  # (ts, first row that may see it, quantities)


def _q(trades: list[tuple[int, float, float, int]]) -> dict[str, float]:
    return {
        "volume": sum(t[2] for t in trades),
        "dollar_volume": sum(t[1] * t[2] for t in trades),
        "trade_count": float(len(trades)),
        "signed_volume": sum(t[3] * t[2] for t in trades),
    }


def _rows_of(table: pa.Table, names: tuple[str, ...]) -> list[tuple[Any, ...]]:
    ts = _ints(table.column("ts_event"))
    return list(zip(ts, *(table.column(n).to_pylist() for n in names), strict=True))


def _as_of(rows: list[tuple[Any, ...]], ts: int) -> tuple[Any, ...] | None:
    seen = [r for r in rows if r[0] <= ts]
    return seen[-1] if seen else None


def build_ref(clock: str, events: dict[EventKind, pa.Table], bar: str | None) -> Ref:
    trades = (
        _rows_of(events[EventKind.TRADES], ("price", "size", "side"))
        if EventKind.TRADES in events
        else []
    )
    quotes_t = events.get(EventKind.QUOTES)
    quotes = (
        _rows_of(quotes_t, ("bid_px", "ask_px", "bid_sz", "ask_sz")) if quotes_t is not None else []
    )
    col: dict[str, list[float]] = {}
    book = ("bid_px", "ask_px", "bid_sz", "ask_sz")
    if clock in ("quotes", "mbp10"):
        table = events[EventKind.QUOTES if clock == "quotes" else EventKind.MBP10]
        suffix = "" if clock == "quotes" else "_00"
        ts = _ints(table.column("ts_event"))
        for name in book:
            col[name] = [float(v) for v in table.column(name + suffix).to_pylist()]
        if clock == "mbp10":
            for name in table.column_names:
                if "_sz_" in name:
                    col[name] = [
                        math.nan if v is None else v for v in table.column(name).to_pylist()
                    ]
        col["px"] = [(b + a) / 2 for b, a in zip(col["bid_px"], col["ask_px"], strict=True)]
        per_row = [
            _q([t for t in trades if (i == 0 or t[0] > ts[i - 1]) and t[0] <= ts[i]])
            for i in range(len(ts))
        ]
        last = [_as_of(trades, t) for t in ts]
        col["last_trade_signed_size"] = [r[3] * r[2] if r else 0.0 for r in last]
        atoms = [(t[0], 0, _q([t])) for t in trades]
    elif clock == "trades":
        ts = [t[0] for t in trades]
        col["price"] = col["px"] = [t[1] for t in trades]
        per_row = [_q([t]) for t in trades]
        col["last_trade_signed_size"] = [t[3] * t[2] for t in trades]
        seen = [_as_of(quotes, t) for t in ts]
        for k, name in enumerate(book):
            col[name] = [r[k + 1] if r else math.nan for r in seen]
        atoms = [(t, i, q) for i, (t, q) in enumerate(zip(ts, per_row, strict=True))]
    else:
        table = (
            events[EventKind.OHLCV]
            if clock == "ohlcv"
            else make_bars(events[EventKind.TRADES], bar or "1s", quotes=quotes_t)
        )
        opens, lengths = _ints(table.column("ts_event")), table.column("interval_ns").to_pylist()
        ts = [o + n for o, n in zip(opens, lengths, strict=True)]
        for name in ("open", "high", "low", "close", "vwap", "volume", "trade_count", *book):
            if name in table.column_names:
                col[name] = [
                    math.nan if v is None else float(v) for v in table.column(name).to_pylist()
                ]
        col["px"] = col["close"]
        per_row = []
        for i in range(len(ts)):
            q = {"volume": col["volume"][i], "trade_count": col["trade_count"][i]}
            vwap = col["vwap"][i]
            q["dollar_volume"] = (col["close"][i] if math.isnan(vwap) else vwap) * q["volume"]
            if clock == "bars" and bar and not bar.startswith(("volume", "dollar")):
                inside = [t for t in trades if opens[i] <= t[0] < ts[i]]
                q["signed_volume"] = _q(inside)["signed_volume"]
            per_row.append(q)
        atoms = [(t, i, q) for i, (t, q) in enumerate(zip(ts, per_row, strict=True))]
    for name in QUANTITIES:
        col[name] = [q.get(name, math.nan) for q in per_row]
    return Ref(ts, col, atoms)


def _window(ref: Ref, i: int, quantity: str, param: str) -> float:
    if not param:
        return ref.col[quantity][i]
    if param.isdigit():
        return sum(ref.col[quantity][max(0, i - int(param) + 1) : i + 1])
    amount, unit = DURATION.fullmatch(param).groups()  # type: ignore[union-attr]
    span = int(amount) * (10**6 if unit == "ms" else 10**9)
    return sum(
        q[quantity] for t, first, q in ref.atoms if ref.ts[i] - span < t <= ref.ts[i] and first <= i
    )


def ref_feature(ref: Ref, name: str, i: int) -> float:
    """One feature at row ``i``, from its documented formula."""
    c = ref.col
    match = re.fullmatch(r"(.+)_(\d+(?:ms|s)?)", name)
    base, param = (
        (match[1], match[2]) if match and match[1] not in ("log1p_bid", "log1p_ask") else (name, "")
    )
    px = c["px"]
    if base in ("return", "log_return"):
        n = int(param or 1)
        ratio = px[i] / px[i - n] if i >= n else 1.0
        return ratio - 1 if base == "return" else math.log(ratio)
    if base == "mid_log_return":
        mid = [(b + a) / 2 for b, a in zip(c["bid_px"], c["ask_px"], strict=True)]
        return math.log(mid[i] / mid[i - 1]) if i else 0.0
    if base == "volatility":
        n = int(param or 20)
        rets = [math.log(px[j] / px[j - 1]) if j else 0.0 for j in range(i + 1)]
        return math.sqrt(sum(r * r for r in rets[max(0, i - n + 1) :]))
    if base in QUANTITIES:
        return _window(ref, i, base, param)
    if base == "vwap_distance":
        volume, dollar = _window(ref, i, "volume", param), _window(ref, i, "dollar_volume", param)
        return 0.0 if dollar == 0 else px[i] * volume / dollar - 1
    if base == "depth_imbalance":
        k = int(param or 10)
        bid = sum(
            0.0 if math.isnan(v) else v for lv in range(k) for v in [c[f"bid_sz_{lv:02d}"][i]]
        )
        ask = sum(
            0.0 if math.isnan(v) else v for lv in range(k) for v in [c[f"ask_sz_{lv:02d}"][i]]
        )
        return 0.0 if bid + ask == 0 else (bid - ask) / (bid + ask)
    b, a, bs, az = (
        c.get(k, [math.nan] * len(ref.ts))[i] for k in ("bid_px", "ask_px", "bid_sz", "ask_sz")
    )
    simple = {
        "mid": lambda: (b + a) / 2,
        "spread": lambda: a - b,
        "spread_bps": lambda: (a - b) / ((b + a) / 2) * 1e4,
        "imbalance": lambda: 0.0 if bs + az == 0 else (bs - az) / (bs + az),
        "log1p_bid_sz": lambda: math.log1p(bs),
        "log1p_ask_sz": lambda: math.log1p(az),
        "range_bps": lambda: (c["high"][i] - c["low"][i]) / c["close"][i] * 1e4,
        "time_of_day": lambda: (ref.ts[i] % 86_400_000_000_000) / 86_400_000_000_000,
        "trades_last_1s": lambda: _window(ref, i, "trade_count", "1s"),
    }
    if name in simple:
        return float(simple[name]())
    return c[name][i]


CLOCK_FEATURES: dict[str, tuple[str, ...]] = {
    "quotes": (
        "mid", "bid_px", "ask_px", "spread", "spread_bps", "imbalance", "log1p_bid_sz",
        "log1p_ask_sz", "return", "return_3", "log_return", "log_return_2", "mid_log_return",
        "volatility_3", "volatility", "volume", "volume_3", "volume_1s", "dollar_volume_2",
        "trade_count_500ms", "signed_volume", "signed_volume_1s", "vwap_distance",
        "vwap_distance_4", "vwap_distance_1s", "time_of_day", "last_trade_signed_size",
        "trades_last_1s",
    ),
    "mbp10": (
        "mid", "spread", "imbalance", "depth_imbalance", "depth_imbalance_3", "depth_imbalance_1",
        "log_return", "signed_volume_1s", "trade_count_2", "time_of_day",
    ),
    "trades": (
        "price", "mid", "spread_bps", "imbalance", "return", "log_return_2", "volatility_3",
        "volume", "volume_3", "dollar_volume_1s", "trade_count_1s", "signed_volume_2",
        "vwap_distance_3", "vwap_distance_500ms", "last_trade_signed_size", "time_of_day",
    ),
    "bars": (
        "open", "high", "low", "close", "vwap", "mid", "range_bps", "return", "log_return_2",
        "volatility_3", "volume", "volume_2", "trade_count_2s", "dollar_volume",
        "vwap_distance", "vwap_distance_2", "time_of_day",
    ),
    "ohlcv": (
        "close", "range_bps", "log_return", "volatility_4", "volume_3", "trade_count",
        "dollar_volume_2s", "vwap_distance_2", "time_of_day",
    ),
}  # fmt: skip

prices = st.integers(8, 40).map(lambda k: k * 0.25)
quote_rows = st.lists(
    st.tuples(st.integers(0, 40), prices, st.integers(0, 3), st.integers(0, 6), st.integers(0, 6)),
    min_size=1,
    max_size=25,
).map(
    lambda rows: sorted(
        ((t * 10**8, p, p + 0.25 * (1 + w), float(b), float(a)) for t, p, w, b, a in rows),
        key=lambda r: r[0],
    )
)
trade_rows = st.lists(
    st.tuples(st.integers(0, 40), prices, st.integers(1, 6), st.sampled_from([-1, 1])),
    min_size=1,
    max_size=25,
).map(lambda rows: sorted(((t * 10**8, p, float(s), d) for t, p, s, d in rows), key=lambda r: r[0]))


def _events(
    clock: str, quotes: list[Any], trades: list[Any], depth: int
) -> dict[EventKind, pa.Table]:
    events = {EventKind.QUOTES: _quotes(quotes), EventKind.TRADES: _trades(trades)}
    if clock == "mbp10":
        events = {EventKind.MBP10: _mbp10(quotes, depth), EventKind.TRADES: _trades(trades)}
    if clock == "ohlcv":
        bars = make_bars(_trades(trades), "1s").select(schema_for(EventKind.OHLCV).names)
        events = {EventKind.OHLCV: bars}
    return events


def _spec(clock: str, bar: str | None, features: tuple[str, ...] | None = None) -> FeatureSpec:
    return FeatureSpec(features or CLOCK_FEATURES[clock], clock=clock, bar=bar)  # type: ignore[arg-type]


CLOCK_CASES = [
    ("quotes", None),
    ("mbp10", None),
    ("trades", None),
    ("bars", "1s"),
    ("bars", "500ms"),
    ("ohlcv", None),
]


@pytest.mark.parametrize(("clock", "bar"), CLOCK_CASES)
@settings(max_examples=25, deadline=None)
@given(quotes=quote_rows, trades=trade_rows, depth=st.integers(1, 10))
def test_every_feature_matches_the_reference(
    clock: str, bar: str | None, quotes: list[Any], trades: list[Any], depth: int
) -> None:
    events = _events(clock, quotes, trades, depth)
    spec = _spec(clock, bar)
    out = compute_features(events, spec)
    ref = build_ref(clock, events, bar)
    assert out.ts.tolist() == ref.ts
    expected = np.array(
        [[ref_feature(ref, f, i) for f in spec.features] for i in range(len(ref.ts))],
        dtype=np.float64,
    ).reshape(len(ref.ts), len(spec.features))
    for j, name in enumerate(spec.features):
        np.testing.assert_allclose(
            out.values[:, j], expected[:, j].astype(np.float32), rtol=2e-5, atol=2e-6, err_msg=name
        )


def test_volume_bars_clock_and_signed_volume() -> None:
    trades = [(0, 10.0, 2.0, 1), (5, 10.25, 3.0, -1), (9, 10.5, 4.0, 1), (9, 10.0, 1.0, -1)]
    events = {EventKind.TRADES: _trades(trades)}
    out = compute_features(events, _spec("bars", "volume:5", ("volume", "signed_volume", "close")))
    # Bars: [2, 3] closes at 5 (cum 5); [4, 1] closes at 9 (partial, cum 10 = 2 x 5 reached).
    assert out.ts.tolist() == [5, 9]
    np.testing.assert_array_equal(out.values, [[5.0, -1.0, 10.25], [5.0, 3.0, 10.0]])


# Point in time: anything stamped after row i's time cannot move row i's features.


@pytest.mark.parametrize(("clock", "bar"), [*CLOCK_CASES, ("bars", "volume:7")])
@settings(max_examples=25, deadline=None)
@given(
    quotes=quote_rows,
    trades=trade_rows,
    new_quotes=quote_rows,
    new_trades=trade_rows,
    cut=st.integers(0, 40).map(lambda t: t * 10**8),
)
def test_point_in_time_every_clock(
    clock: str,
    bar: str | None,
    quotes: list[Any],
    trades: list[Any],
    new_quotes: list[Any],
    new_trades: list[Any],
    cut: int,
) -> None:
    features = (
        CLOCK_FEATURES[clock]
        if clock != "bars" or bar == "1s"
        else ("close", "volume_2", "vwap_distance")
    )
    spec = _spec(clock, bar, features)
    later = 5 * 10**7  # shift the new events off the old grid so they land strictly after the cut
    q2 = [q for q in quotes if q[0] <= cut] + [(cut + later + q[0], *q[1:]) for q in new_quotes]
    t2 = [t for t in trades if t[0] <= cut] + [(cut + later + t[0], *t[1:]) for t in new_trades]
    before = compute_features(_events(clock, quotes, trades, 3), spec)
    after = compute_features(_events(clock, q2, t2, 3), spec)
    known_before, known_after = before.ts <= cut, after.ts <= cut
    np.testing.assert_array_equal(before.ts[known_before], after.ts[known_after])
    np.testing.assert_array_equal(before.values[known_before], after.values[known_after])


# Labels: rows and durations, NaN past the end, and they see only their horizon.


@settings(max_examples=40, deadline=None)
@given(
    quotes=quote_rows,
    kind=st.sampled_from(["forward_return", "forward_log_return", "forward_value"]),
    rows=st.integers(1, 6),
    span=st.integers(1, 30).map(lambda t: t * 10**8),
    source=st.sampled_from(["mid", "bid_px", "spread_bps", "volatility_3"]),
)
def test_labels_match_reference(
    quotes: list[Any], kind: str, rows: int, span: int, source: str
) -> None:
    spec = FeatureSpec(
        ("mid",),
        (
            LabelSpec("by_rows", source, kind, horizon_rows=rows),
            LabelSpec("by_time", source, kind, horizon_ns=span),
        ),  # type: ignore[arg-type]
    )
    events = {EventKind.QUOTES: _quotes(quotes)}
    out = compute_features(events, spec)
    ref = build_ref("quotes", events, None)
    x = [ref_feature(ref, source, i) for i in range(len(ref.ts))]
    n = len(x)

    def label(i: int, j: int | None) -> float:
        if j is None:
            return math.nan
        if kind == "forward_value":
            return x[j]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.float64(x[j]) / np.float64(x[i])
        return float(np.log(ratio)) if kind == "forward_log_return" else float(ratio - 1)

    by_rows = [label(i, i + rows if i + rows < n else None) for i in range(n)]
    by_time = []
    for i, t in enumerate(ref.ts):
        end = t + span
        j = max(k for k in range(n) if ref.ts[k] <= end) if end <= ref.ts[-1] else None
        by_time.append(label(i, j))
    expected = np.array([by_rows, by_time], dtype=np.float32).T
    np.testing.assert_allclose(out.labels, expected, rtol=2e-5, atol=2e-6)
    assert np.isnan(out.labels[max(0, n - rows) :, 0]).all()


@settings(max_examples=30, deadline=None)
@given(quotes=quote_rows, other=quote_rows, row=st.integers(0, 24), horizon=st.integers(1, 5))
def test_labels_look_ahead_only_within_the_horizon(
    quotes: list[Any], other: list[Any], row: int, horizon: int
) -> None:
    assume(row < len(quotes))
    spec = FeatureSpec(("mid",), (LabelSpec("y", "mid", "forward_value", horizon_rows=horizon),))
    # Rows past row + horizon get other prices (same times, so row positions stay).
    changed = quotes[: row + horizon + 1] + [
        (q[0], *other[k % len(other)][1:]) for k, q in enumerate(quotes[row + horizon + 1 :])
    ]
    a = compute_features({EventKind.QUOTES: _quotes(quotes)}, spec)
    b = compute_features({EventKind.QUOTES: _quotes(changed)}, spec)
    np.testing.assert_array_equal(a.labels[: row + 1], b.labels[: row + 1])


# Normalization stats: only the declared period counts.


@settings(max_examples=30, deadline=None)
@given(
    data=st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=60),
    splits=st.lists(st.integers(0, 60), max_size=3),
    period=st.tuples(st.integers(0, 30), st.integers(1, 40)),
    seed=st.integers(0, 2**16),
)
def test_stats_use_only_the_period(
    data: list[float], splits: list[int], period: tuple[int, int], seed: int
) -> None:
    n = len(data)
    ts = np.arange(n, dtype=np.int64) * 10
    values = np.array(data).reshape(n, 1).repeat(2, axis=1)
    values[::3, 1] = np.nan  # skipped per feature
    first = period[0] % n  # the period always holds at least row `first`
    start, end = first * 10, first * 10 + period[1] * 10
    inside = (ts >= start) & (ts < end)
    assert inside.any()
    acc = FeatureStatsAccumulator(("a", "b"), (start, end))
    cuts = sorted({0, n, *(min(s, n) for s in splits)})
    parts = []
    for lo, hi in itertools.pairwise(cuts):  # many segments, some merged from another worker
        part = FeatureStatsAccumulator(("a", "b"), (start, end))
        part.update(ts[lo:hi], values[lo:hi])
        parts.append(part)
    for part in parts:
        acc.merge(part)
    stats = acc.result()
    assert stats.count == int(inside.sum())
    assert stats.period == (start, end)
    a = values[inside, 0]
    assert stats.mean[0] == pytest.approx(a.mean(), rel=1e-9, abs=1e-9)
    assert stats.std[0] == pytest.approx(a.std(), rel=1e-7, abs=1e-7)
    b = values[inside, 1]
    b = b[np.isfinite(b)]
    if b.size:
        assert stats.mean[1] == pytest.approx(b.mean(), rel=1e-9, abs=1e-9)
    # Rows outside the period changing changes nothing.
    noisy = values.copy()
    noisy[~inside] = np.random.default_rng(seed).normal(1e6, 1e6, ((~inside).sum(), 2))
    other = FeatureStatsAccumulator(("a", "b"), (start, end))
    other.update(ts, noisy)
    clean = FeatureStatsAccumulator(("a", "b"), (start, end))
    clean.update(ts, values)
    got, want = other.result(), clean.result()
    np.testing.assert_array_equal([got.mean, got.std], [want.mean, want.std])
    assert got.count == want.count


def test_stats_for_spec_and_errors() -> None:
    out = build_features(QUOTES, TRADES)
    with pytest.raises(ConfigError, match="declares no stats_period"):
        FeatureStatsAccumulator.for_spec(DEMO_FEATURE_SPEC)
    ts = out.ts
    spec = FeatureSpec(FEATURES, stats_period=(int(ts[0]), int(ts[len(ts) // 2])))
    acc = FeatureStatsAccumulator.for_spec(spec)
    assert acc.add(out) == len(ts) // 2
    stats = acc.result()
    assert stats.names == FEATURES
    np.testing.assert_allclose(
        stats.mean, out.values[: len(ts) // 2].astype(np.float64).mean(0), rtol=1e-6
    )
    empty = FeatureStatsAccumulator(("a",), (0, 1))
    with pytest.raises(ConfigError, match=r"no rows fell in the stats period \[0, 1\)"):
        empty.result()


# Specs in TOML.


def test_example_spec_and_toml_round_trip(tmp_path: Path) -> None:
    spec = load_spec(EXAMPLE)
    assert (spec.clock, spec.bar) == ("bars", "1s")
    assert spec.labels[1].horizon == ("ns", 60 * 10**9)
    for original in (spec, DEMO_FEATURE_SPEC, default_spec({EventKind.MBP10, EventKind.TRADES})):
        path = tmp_path / "spec.toml"
        path.write_text(dump_spec(original))
        assert load_spec(path) == original


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('features = ["vpin"]', r"unknown feature\(s\) \['vpin'\] for clock 'quotes'; known: mid"),
        ('clock = "ohlcv"\nfeatures = ["spread"]', r"\['spread'\] for clock 'ohlcv'"),
        ('features = ["volume_0"]', r"unknown feature\(s\) \['volume_0'\]"),
        ('features = ["volatility_1s"]', r"unknown feature\(s\) \['volatility_1s'\]"),
        ('clock = "bars"\nfeatures = ["volume"]', "clock 'bars' needs a bar rule"),
        ('clock = "bars"\nbar = "2x"\nfeatures = ["volume"]', "duration '2x' is not a positive"),
        ('features = ["mid"]\ncolour = 1', r"unknown key\(s\) \['colour'\]"),
        (
            'features = ["mid"]\nstats_period = [2024-01-02T00:00:00, 2024-01-03T00:00:00Z]',
            "needs a UTC offset",
        ),
        (
            'features = ["mid"]\n[[labels]]\nname = "y"\nsource = "close"\nhorizon = 3',
            r"unknown label source\(s\) \['close'\]",
        ),
        ('features = ["mid"', "not valid TOML"),
    ],
)  # fmt: skip
def test_spec_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_spec(path)


def test_missing_inputs_are_explained() -> None:
    with pytest.raises(ConfigError, match=r"clock 'trades' needs trades events; got \['quotes'\]"):
        compute_features({EventKind.QUOTES: QUOTES}, FeatureSpec(("price",), clock="trades"))
    with pytest.raises(
        ConfigError, match=r"column '(bid|ask)_px' is not available on clock 'trades'; pass quotes"
    ):
        compute_features({EventKind.TRADES: TRADES}, FeatureSpec(("spread",), clock="trades"))
    assert "depth_imbalance[_N]" in known_features("mbp10")
    assert "depth_imbalance[_N]" not in known_features("quotes")


# Every clock on synthetic data, and real trades through 1 s bars.


def _synthetic_mbp10(quotes: pa.Table) -> pa.Table:
    names = ("bid_px", "ask_px", "bid_sz", "ask_sz")
    columns = (quotes.column(c).to_pylist() for c in names)
    rows = list(zip(_ints(quotes.column("ts_event")), *columns, strict=True))
    return _mbp10(rows, depth=5)


@pytest.mark.parametrize(
    "kinds",
    [
        {EventKind.QUOTES, EventKind.TRADES},
        {EventKind.QUOTES},
        {EventKind.TRADES},
        {EventKind.MBP10, EventKind.TRADES},
        {EventKind.OHLCV},
    ],
)
def test_default_spec_on_every_clock(kinds: set[EventKind]) -> None:
    events = {
        EventKind.QUOTES: QUOTES,
        EventKind.TRADES: TRADES,
        EventKind.MBP10: _synthetic_mbp10(QUOTES),
        EventKind.OHLCV: make_bars(TRADES, "1m").select(schema_for(EventKind.OHLCV).names),
    }
    spec = default_spec(kinds)
    out = compute_features({k: events[k] for k in kinds}, spec)
    assert out.values.shape == (len(out.ts), len(spec.features))
    assert len(out.ts) > 10
    assert np.isfinite(out.values).all()
    assert (np.diff(out.ts) >= 0).all()
    assert np.isnan(out.labels[-10:]).all()
    assert np.isfinite(out.labels[:-10]).all()
    for name, clock in (({EventKind.MBP10}, "mbp10"), ({EventKind.QUOTES}, "quotes")):
        assert default_spec(name).clock == clock
    with pytest.raises(ConfigError, match="no feature clock for event kinds"):
        default_spec({EventKind.MBO})


def test_trades_and_volume_bar_clocks_on_synthetic_data() -> None:
    for spec in (
        FeatureSpec(("mid", "spread_bps", "signed_volume_10", "vwap_distance_1s"), clock="trades"),
        FeatureSpec(("close", "volume", "signed_volume", "mid"), clock="bars", bar="volume:2000"),
        FeatureSpec(("close", "dollar_volume", "trade_count"), clock="bars", bar="dollar:1e5"),
    ):
        out = compute_features({EventKind.QUOTES: QUOTES, EventKind.TRADES: TRADES}, spec)
        assert np.isfinite(out.values).all()
        assert len(out.ts) > 3


@pytest.mark.skipif(not BINANCE.exists(), reason="shared sample data not present")
def test_real_binance_trades_on_1s_bars() -> None:
    raw = pq.read_table(BINANCE)
    trades = conform(
        pa.table(
            {
                "ts_event": raw.column("timestamp"),
                "symbol": pa.array(["BTCUSDT"] * raw.num_rows),
                "price": raw.column("price"),
                "size": raw.column("quantity"),
                "side": pc.if_else(pc.equal(raw.column("buyer_maker"), "True"), -1, 1).cast(
                    pa.int8()
                ),
            }
        ),
        EventKind.TRADES,
    ).sort_by("ts_event")
    spec = default_spec({EventKind.TRADES})
    out = compute_features({EventKind.TRADES: trades}, spec)
    bars = make_bars(trades, "1s")
    assert len(out.ts) == bars.num_rows
    opens = np.array(_ints(bars.column("ts_event")))
    np.testing.assert_array_equal(out.ts, opens + 1_000_000_000)
    assert np.isfinite(out.values).all()
    volume = out.values[:, spec.features.index("volume")]
    np.testing.assert_allclose(volume, bars.column("volume").to_numpy().astype(np.float32))
