"""The demo feature builder: a slow reference, point-in-time correctness and errors."""

from __future__ import annotations

import math
from datetime import date

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import ConfigError, SchemaError
from ticktensor.ingest import (
    DEMO_FEATURE_SPEC,
    FEATURES,
    SyntheticMarket,
    build_features,
    demo_feature_spec,
    generate_day,
)
from ticktensor.schemas import EventKind, FeatureSpec, LabelSpec

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
