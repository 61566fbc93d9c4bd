"""Synthetic market data: determinism, schema, validity and market realism."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, time

import numpy as np
import pyarrow as pa
import pytest

from ticktensor.errors import ConfigError
from ticktensor.ingest import SyntheticMarket, generate_day, iter_days
from ticktensor.schemas import EventKind, schema_for, validate

MARKET = SyntheticMarket(
    symbols=("AAA", "BBB"),
    start=date(2024, 3, 1),  # a Friday: the second day is Monday the 4th
    n_days=2,
    quotes_per_day=5_000,
    trades_per_day=1_000,
    base_prices=(50.0, 2500.0),
    seed=7,
)


def _ns(table: pa.Table, column: str = "ts_event") -> np.ndarray:
    return table.column(column).cast(pa.int64()).to_numpy()


def test_calendar_skips_weekends_and_sessions_are_utc() -> None:
    assert MARKET.days == (date(2024, 3, 1), date(2024, 3, 4))
    open_ns, close_ns = MARKET.session_ns(date(2024, 3, 1))
    assert open_ns == 1709303400 * 10**9  # 2024-03-01 14:30 UTC
    assert close_ns - open_ns == 390 * 60 * 10**9


def test_deterministic_and_seed_dependent() -> None:
    day = MARKET.days[1]
    a = generate_day(MARKET, "BBB", day)
    b = generate_day(MARKET, "BBB", day)
    assert a[EventKind.QUOTES].equals(b[EventKind.QUOTES])
    assert a[EventKind.TRADES].equals(b[EventKind.TRADES])
    other = replace(MARKET, seed=8)
    assert not generate_day(other, "BBB", day)[EventKind.QUOTES].equals(a[EventKind.QUOTES])
    # Each (symbol, day) has its own stream: generating others first changes nothing.
    everything = {(s, d): t for s, d, t in iter_days(MARKET)}
    assert everything[("BBB", day)][EventKind.TRADES].equals(a[EventKind.TRADES])
    # An explicit generator or seed is honoured.
    c = generate_day(MARKET, "BBB", day, np.random.default_rng(3))
    d = generate_day(MARKET, "BBB", day, 3)
    assert c[EventKind.QUOTES].equals(d[EventKind.QUOTES])


@pytest.mark.parametrize(("symbol", "day"), [(s, d) for s in MARKET.symbols for d in MARKET.days])
def test_tables_have_canonical_schema_and_validate(symbol: str, day: date) -> None:
    tables = generate_day(MARKET, symbol, day)
    session = MARKET.session_ns(day)
    for kind, table in tables.items():
        assert table.schema == schema_for(kind)
        assert table.num_rows > 0
        result = validate(table, kind, ts_range=session)
        assert result.ok, result.violations.slice(0, 5).to_pylist()
        ts = _ns(table)
        assert np.all(np.diff(ts) >= 0), "sorted by ts_event"
        assert np.all(_ns(table, "ts_recv") > ts), "captured after the event"
        assert table.column("symbol").unique().to_pylist() == [symbol]
        assert table.column("venue").unique().to_pylist() == ["XSYN"]
        assert np.all(np.diff(table.column("sequence").to_numpy().astype(np.int64)) == 1)


def test_quotes_are_on_the_tick_grid_and_never_crossed() -> None:
    quotes = generate_day(MARKET, "AAA", MARKET.days[0])[EventKind.QUOTES]
    bid, ask = quotes.column("bid_px").to_numpy(), quotes.column("ask_px").to_numpy()
    spread_ticks = (ask - bid) / MARKET.tick_size
    assert np.all(spread_ticks > 0.999)
    for px in (bid, ask):
        ticks = px / MARKET.tick_size
        np.testing.assert_allclose(ticks, np.round(ticks), atol=1e-6)
    assert np.mean(np.round(spread_ticks) == 1) > 0.4, "most spreads are one tick"
    assert np.max(spread_ticks) >= 5, "now and then the spread widens"
    for column in ("bid_sz", "ask_sz"):
        size = quotes.column(column).to_numpy()
        assert np.all(size >= 1)
        assert np.all(size == np.round(size))
    assert abs(bid[0] / 50.0 - 1) < 0.01, "the first session opens at the base price"


def test_trades_hit_the_prevailing_quote_on_the_aggressor_side() -> None:
    tables = generate_day(MARKET, "BBB", MARKET.days[0])
    quotes, trades = tables[EventKind.QUOTES], tables[EventKind.TRADES]
    prevailing = np.searchsorted(_ns(quotes), _ns(trades), side="right") - 1
    assert np.all(prevailing >= 0)
    side = trades.column("side").to_numpy()
    price = trades.column("price").to_numpy()
    expected = np.where(
        side == 1,
        quotes.column("ask_px").to_numpy()[prevailing],
        quotes.column("bid_px").to_numpy()[prevailing],
    )
    np.testing.assert_array_equal(price, expected)
    assert set(np.unique(side)) == {-1, 1}
    size = trades.column("size").to_numpy()
    assert np.all(size >= 1)
    assert np.all(size == np.round(size))
    assert trades.column("trade_id").null_count == 0
    assert len(trades.column("trade_id").unique()) == trades.num_rows


def test_intensity_is_u_shaped() -> None:
    market = SyntheticMarket(symbols=("X",), quotes_per_day=60_000, trades_per_day=0)
    quotes = generate_day(market, "X", market.days[0])[EventKind.QUOTES]
    open_ns, close_ns = market.session_ns(market.days[0])
    frac = (_ns(quotes) - open_ns) / (close_ns - open_ns)
    counts = np.histogram(frac, bins=10, range=(0, 1))[0]
    assert counts[0] > 1.8 * counts[5]
    assert counts[-1] > 1.8 * counts[4]
    assert generate_day(market, "X", market.days[0])[EventKind.TRADES].num_rows == 0


def test_volatility_scales_the_price_path() -> None:
    def log_range(vol: float) -> float:
        market = SyntheticMarket(symbols=("X",), n_days=5, daily_volatility=vol, seed=1)
        closes = [
            generate_day(market, "X", d)[EventKind.QUOTES].column("bid_px").to_numpy()[-1]
            for d in market.days
        ]
        return float(np.std(np.diff(np.log(closes))))

    assert log_range(0.0) < 1e-3
    assert log_range(0.05) > 0.01


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"symbols": ()}, "symbols must be non-empty and unique"),
        ({"symbols": ("A", "A")}, "symbols must be non-empty and unique"),
        ({"base_prices": (1.0,)}, "base_prices has 1 entries for 2 symbols"),
        ({"base_prices": (1.0, -1.0)}, "base_prices must all be > 0"),
        ({"n_days": 0}, "n_days must be >= 1"),
        ({"session_open": time(21), "session_close": time(14)}, "must be before session_close"),
        ({"tick_size": 0.0}, "tick_size must be > 0"),
        ({"daily_volatility": -0.1}, "daily_volatility must be >= 0"),
        ({"mean_spread_ticks": 0.5}, "mean_spread_ticks must be >= 1"),
    ],
)
def test_config_is_validated(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SyntheticMarket(**kwargs)  # type: ignore[arg-type]


def test_unknown_symbol_or_day() -> None:
    with pytest.raises(ConfigError, match="symbol 'ZZZ' is not one of"):
        generate_day(MARKET, "ZZZ", MARKET.days[0])
    with pytest.raises(ConfigError, match="day 2024-03-02 is not a session"):
        generate_day(MARKET, "AAA", date(2024, 3, 2))
