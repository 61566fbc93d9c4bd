"""Helpers of the live parity tests: batch references (float32 and float64) and row order."""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute
import pytest

from ticktensor.ingest import SyntheticMarket, _feature_engine, generate_day, make_bars
from ticktensor.ingest.features import SymbolFeatures, compute_session_features
from ticktensor.live import LiveRows
from ticktensor.schemas import EventKind, FeatureSpec, conform

BOOK = (
    "mid", "bid_px", "ask_px", "spread", "spread_bps", "imbalance", "log1p_bid_sz",
    "log1p_ask_sz", "mid_log_return",
)  # fmt: skip
COMMON = (
    "return", "return_5", "log_return", "log_return_3", "volatility", "volatility_3",
    "volume", "volume_4", "volume_1s", "dollar_volume", "dollar_volume_500ms", "trade_count",
    "trade_count_10", "trade_count_2s", "signed_volume", "signed_volume_3", "signed_volume_2s",
    "vwap_distance", "vwap_distance_5", "vwap_distance_1s", "time_of_day",
    "last_trade_signed_size", "trades_last_1s",
)  # fmt: skip
DEPTH = (
    "depth_imbalance", "depth_imbalance_1", "depth_imbalance_3", *BOOK, *COMMON,
)  # fmt: skip
BARS = (
    "open", "high", "low", "close", "vwap", "range_bps", "return", "return_5", "log_return",
    "log_return_3", "volatility", "volatility_3", "volume", "volume_4", "volume_5m",
    "dollar_volume", "dollar_volume_3", "trade_count", "trade_count_2", "trade_count_10m",
    "vwap_distance", "vwap_distance_3", "vwap_distance_5m", "time_of_day", "trades_last_1s",
)  # fmt: skip
FEATURES = {
    "quotes": BOOK + COMMON,
    "trades": ("price", *BOOK, *COMMON),
    "ohlcv": BARS,
    "mbp10": DEPTH,
    "bars": (*BARS, "signed_volume", "signed_volume_3", "signed_volume_2m", *BOOK),
}
"""Every feature kind the live engine computes, per clock, with several parameters."""


def live_spec(clock: str, bar: str = "1s") -> FeatureSpec:
    spec = FeatureSpec(
        FEATURES[clock],
        version=2,
        clock=clock,  # type: ignore[arg-type]
        bar=bar if clock == "bars" else None,
    )
    return spec


@functools.cache
def market(symbols: tuple[str, ...] = ("A", "B", "C"), quotes: int = 3000, trades: int = 800,
           seed: int = 7) -> dict[EventKind, pa.Table]:  # fmt: skip
    m = SyntheticMarket(symbols=symbols, quotes_per_day=quotes, trades_per_day=trades, seed=seed)
    days = [generate_day(m, s, m.days[0]) for s in m.symbols]
    return {k: pa.concat_tables([d[k] for d in days]) for k in (EventKind.QUOTES, EventKind.TRADES)}


@functools.cache
def bars(symbols: tuple[str, ...] = ("A", "B", "C"), rule: str = "1m") -> dict[EventKind, pa.Table]:
    """Bars of the generated trades, as a vendor's ohlcv file would hold them."""
    trades = market(symbols, quotes=200, trades=3000)[EventKind.TRADES]
    tables = []
    for symbol in symbols:
        mine = trades.filter(pa.compute.equal(trades.column("symbol"), symbol))
        tables.append(make_bars(mine, rule))
    return {EventKind.OHLCV: conform(pa.concat_tables(tables), "ohlcv")}


@functools.cache
def books(symbols: tuple[str, ...] = ("A", "B")) -> dict[EventKind, pa.Table]:
    """MBP-10 events built from the generated quotes (ten levels a tick apart, some empty,
    random actions) and the generated trades."""
    events = market(symbols, quotes=2000, trades=500)
    quotes = events[EventKind.QUOTES]
    n = quotes.num_rows
    rng = np.random.default_rng(3)
    bid = quotes.column("bid_px").to_numpy()
    ask = quotes.column("ask_px").to_numpy()
    columns: dict[str, object] = {
        "ts_event": quotes.column("ts_event"),
        "symbol": quotes.column("symbol"),
        "action": rng.choice(list("ACMTFR"), n).tolist(),
        "side": rng.choice([-1, 0, 1], n).astype(np.int8),
        "price": np.round(bid, 2),
        "size": rng.integers(1, 9, n).astype(np.float64),
    }
    for level in range(10):
        empty = rng.random(n) < 0.05 * level
        for side, top, step in (("bid", bid, -0.01), ("ask", ask, 0.01)):
            px = np.where(empty, np.nan, top + step * level)
            sz = np.where(empty, np.nan, rng.integers(0, 50, n).astype(np.float64))
            columns[f"{side}_px_{level:02d}"] = pa.array(px, pa.float64(), from_pandas=True)
            columns[f"{side}_sz_{level:02d}"] = pa.array(sz, pa.float64(), from_pandas=True)
    table = conform(pa.table(columns), "mbp10")
    return {EventKind.MBP10: table, EventKind.TRADES: events[EventKind.TRADES]}


def batch_reference(
    events: Mapping[EventKind, pa.Table], spec: FeatureSpec, monkeypatch: pytest.MonkeyPatch
) -> tuple[SymbolFeatures, npt.NDArray[np.float64]]:
    """The session's stored rows, and their float64 values before the cast to float32."""
    seen: list[npt.NDArray[np.float64]] = []
    real = _feature_engine.stack_columns_f32

    def capture(columns: list[npt.NDArray[np.float64]], n: int) -> npt.NDArray[np.float32]:
        seen.append(np.stack([np.asarray(c, dtype=np.float64) for c in columns], axis=1))
        return real(columns, n)

    monkeypatch.setattr(_feature_engine, "stack_columns_f32", capture)
    ref = compute_session_features(events, spec)
    monkeypatch.setattr(_feature_engine, "stack_columns_f32", real)
    return ref, seen[0].reshape(-1, len(spec.features))


def by_symbol(rows: LiveRows, symbols: tuple[str, ...]) -> npt.NDArray[np.intp]:
    """The order that puts live rows (event order) as the store holds them: by symbol."""
    rank = {s: i for i, s in enumerate(symbols)}
    codes = np.array([rank.get(s, -1) for s in rows.symbols], dtype=np.int64)
    return np.argsort(codes[rows.symbol], kind="stable")


def assert_bits_equal(live: npt.NDArray[np.floating], stored: npt.NDArray[np.floating],
                      names: tuple[str, ...]) -> None:  # fmt: skip
    """Exactly the same numbers (NaN where the store has NaN, the same sign of zero)."""
    assert live.shape == stored.shape, (live.shape, stored.shape)
    assert live.dtype == stored.dtype
    width = np.uint32 if live.dtype == np.float32 else np.uint64
    # NaNs compare equal whatever their payload; every other value bit for bit.
    both_nan = np.isnan(live) & np.isnan(stored)
    differ = (live.view(width) != stored.view(width)) & ~both_nan
    if differ.any():
        rows, cols = np.nonzero(differ)
        bad = {names[c]: int((cols == c).sum()) for c in np.unique(cols)}
        r, c = rows[0], cols[0]
        raise AssertionError(
            f"live rows differ from stored ones in {bad}; first at row {r}, "
            f"{names[c]}: live {live[r, c]!r}, stored {stored[r, c]!r}"
        )
