"""Features of a whole session at once: each symbol's rows as if it were alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import SchemaError
from ticktensor.ingest import compute_features, compute_session_features
from ticktensor.schemas import EventKind, FeatureSpec, LabelSpec, conform

from .test_features import CLOCK_CASES, CLOCK_FEATURES, _events, quote_rows, trade_rows

SYMBOLS = ("AAA", "BB/X", "C")  # "BB/X" sorts between the others, as text does


def _tagged(table: pa.Table, symbol: str) -> pa.Table:
    column = pa.array([symbol] * table.num_rows, pa.string())
    if "symbol" in table.column_names:
        return table.set_column(table.schema.get_field_index("symbol"), "symbol", column)
    return table.append_column("symbol", column)


def _session(per_symbol: dict[str, dict[EventKind, pa.Table]]) -> dict[EventKind, pa.Table]:
    """One table per kind holding every symbol's events, sorted by (symbol, ts)."""
    kinds = {k for events in per_symbol.values() for k in events}
    out = {}
    for kind in kinds:
        parts = [
            _tagged(events[kind], sym)
            for sym, events in sorted(per_symbol.items())
            if kind in events
        ]
        out[kind] = pa.concat_tables(parts)
    return out


def _spec(clock: str, bar: str | None, features: tuple[str, ...]) -> FeatureSpec:
    labels = (
        LabelSpec("by_rows", "log_return", "forward_log_return", horizon_rows=2),
        LabelSpec("by_time", features[0], "forward_value", horizon_ns=7 * 10**8),
    )
    return FeatureSpec(features, labels, clock=clock, bar=bar)  # type: ignore[arg-type]


def assert_same_as_alone(
    per_symbol: dict[str, dict[EventKind, pa.Table]], spec: FeatureSpec
) -> None:
    """The session's rows of each symbol are bit for bit what the symbol alone gives."""
    out = compute_session_features(_session(per_symbol), spec)
    assert out.symbols == tuple(sorted(per_symbol))
    assert out.offsets[0] == 0
    assert out.offsets[-1] == out.features.ts.size
    for i, symbol in enumerate(out.symbols):
        alone = compute_features(per_symbol[symbol], spec)
        rows = slice(int(out.offsets[i]), int(out.offsets[i + 1]))
        np.testing.assert_array_equal(out.features.ts[rows], alone.ts, err_msg=symbol)
        np.testing.assert_array_equal(out.features.values[rows], alone.values, err_msg=symbol)
        np.testing.assert_array_equal(out.features.labels[rows], alone.labels, err_msg=symbol)
    assert out.features.feature_names == spec.features


@pytest.mark.parametrize(("clock", "bar"), [*CLOCK_CASES, ("bars", "volume:7")])
@settings(max_examples=20, deadline=None)
@given(
    books=st.lists(st.tuples(quote_rows, trade_rows), min_size=1, max_size=3),
    depth=st.integers(1, 10),
)
def test_every_feature_per_symbol_equals_the_symbol_alone(
    clock: str, bar: str | None, books: list[tuple[Any, Any]], depth: int
) -> None:
    per_symbol = {
        symbol: _events(clock, quotes, trades, depth)
        for symbol, (quotes, trades) in zip(SYMBOLS, books, strict=False)
    }
    features = CLOCK_FEATURES[clock] if bar != "volume:7" else ("close", "volume_2", "return")
    assert_same_as_alone(per_symbol, _spec(clock, bar, features))


def test_a_symbol_without_the_secondary_kind_sees_none_of_the_others() -> None:
    # AAA has quotes and trades, C quotes only: C's trade features are zero, not AAA's.
    quotes = [(0, 10.0, 10.25, 1.0, 2.0), (10**9, 10.5, 10.75, 2.0, 1.0)]
    trades = [(5 * 10**8, 10.0, 3.0, 1)]
    per_symbol = {
        "AAA": _events("quotes", quotes, trades, 1),
        "C": {EventKind.QUOTES: _events("quotes", quotes, trades, 1)[EventKind.QUOTES]},
    }
    spec = FeatureSpec(("signed_volume_1s", "last_trade_signed_size"))
    assert_same_as_alone(per_symbol, spec)
    out = compute_session_features(_session(per_symbol), spec)
    assert out.features.values[2:].tolist() == [[0.0, 0.0], [0.0, 0.0]]


# Point in time on wide data: a symbol's features do not depend on any other's rows.


def _wide(rng: np.random.Generator, symbols: int, rows: int) -> dict[str, pa.Table]:
    out = {}
    for k in range(symbols):
        n = int(rng.integers(1, rows))
        ts = np.sort(rng.integers(0, 60 * 10**9, n))
        out[f"S{k:03d}"] = conform(
            pa.table(
                {
                    "ts_event": pa.array(ts, pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
                    "symbol": [f"S{k:03d}"] * n,
                    "price": 50 + k + np.round(np.cumsum(rng.normal(0, 0.1, n)), 2),
                    "size": rng.integers(1, 100, n).astype(np.float64),
                    "side": np.where(rng.random(n) < 0.5, 1, -1).astype(np.int8),
                }
            ),
            "trades",
        )
    return out


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), change=st.sampled_from(["drop", "perturb", "extend"]))
def test_wide_session_features_of_a_symbol_ignore_the_other_symbols(seed: int, change: str) -> None:
    """Many symbols in one session: rewriting symbol B's rows leaves A's rows unchanged."""
    rng = np.random.default_rng(seed)
    trades = _wide(rng, 60, 80)
    spec = FeatureSpec(
        ("log_return", "volatility_5", "volume_3", "signed_volume_2s", "vwap_distance_4"),
        (
            LabelSpec("y", "close", horizon_rows=3),
            LabelSpec("z", "close", "forward_value", horizon_ns=5 * 10**9),
        ),
        clock="bars",
        bar="1s",
    )
    session = pa.concat_tables(trades.values())
    before = compute_session_features({EventKind.TRADES: session}, spec)
    victim = sorted(trades)[int(rng.integers(0, len(trades)))]
    other = trades[victim]
    if change == "drop":
        del trades[victim]
    elif change == "perturb":
        prices = other.column("price").to_numpy() * rng.uniform(0.5, 2.0, other.num_rows)
        index = other.schema.get_field_index("price")
        trades[victim] = other.set_column(index, other.schema.field(index), pa.array(prices))
    else:  # more and earlier rows: its own series starts before every other's
        early = other.slice(0, 1).set_column(
            0, other.schema.field(0), pa.array([0], pa.timestamp("ns", tz="UTC"))
        )
        trades[victim] = pa.concat_tables([early, early, other])
    after = compute_session_features(
        {EventKind.TRADES: pa.concat_tables(trades[s] for s in sorted(trades))}, spec
    )
    for symbol in trades:
        if symbol == victim:
            continue
        i, j = before.symbols.index(symbol), after.symbols.index(symbol)
        a = slice(int(before.offsets[i]), int(before.offsets[i + 1]))
        b = slice(int(after.offsets[j]), int(after.offsets[j + 1]))
        np.testing.assert_array_equal(before.features.ts[a], after.features.ts[b])
        np.testing.assert_array_equal(before.features.values[a], after.features.values[b])
        np.testing.assert_array_equal(before.features.labels[a], after.features.labels[b])


def test_rows_must_be_sorted_by_symbol_then_time() -> None:
    rng = np.random.default_rng(1)
    trades = _wide(rng, 2, 10)
    spec = FeatureSpec(("close",), clock="bars", bar="1s")
    backwards = pa.concat_tables([trades["S001"], trades["S000"]])
    with pytest.raises(SchemaError, match="not grouped by symbol"):
        compute_session_features({EventKind.TRADES: backwards}, spec)
    one = trades["S001"]
    assert one.num_rows > 1
    shuffled = pa.concat_tables([trades["S000"], one.slice(1), one.slice(0, 1)])
    with pytest.raises(
        SchemaError,
        match=r"is before row \d+'s \d+ \(rule: sorted by ts_event "
        "within each symbol",
    ):
        compute_session_features({EventKind.TRADES: shuffled}, spec)
    with pytest.raises(SchemaError, match=r"is before row \d+'s \d+ \(rule: sorted by ts_event\)"):
        compute_session_features({EventKind.TRADES: shuffled.slice(trades["S000"].num_rows)}, spec)


@pytest.mark.parametrize("bar", ["1s", "1m", "volume:5000", "dollar:300000"])
def test_bars_of_many_trades_sum_as_the_symbol_alone_does(bar: str) -> None:
    """Sums over bars of hundreds of trades, whose rows sit anywhere in the session."""
    rng = np.random.default_rng(5)
    trades = _wide(rng, 12, 6000)
    per_symbol = {s: {EventKind.TRADES: t} for s, t in trades.items()}
    spec = FeatureSpec(
        ("open", "close", "volume", "dollar_volume", "signed_volume", "vwap_distance_3"),
        (LabelSpec("y", "close", horizon_rows=2),),
        clock="bars",
        bar=bar,
    )
    assert_same_as_alone(per_symbol, spec)
