"""Synthetic market data: deterministic, realistic quotes and trades generated in-process.

The model, per (symbol, session):

- event times form a Poisson process whose intensity is U-shaped over the session
  (busier at open and close), drawn as exponential gaps then time-changed;
- a latent efficient log price follows a Brownian motion scaled so one session has
  standard deviation ``daily_volatility``; session opens follow a random walk too;
- quotes are the latent price plus microstructure noise, minus/plus half a spread of
  at least one tick (now and then much wider), on the tick grid, so ``bid < ask``;
- sizes are integers >= 1 drawn from a lognormal;
- a trade executes at the quote in force at its time: at the ask when the aggressor
  buys (side +1), at the bid when it sells (side -1); buying is likelier when the
  bid is deeper than the ask.

Everything is vectorized numpy; one million quotes take a fraction of a second.

Examples
--------
>>> from datetime import date
>>> market = SyntheticMarket(symbols=("SYNA",), start=date(2024, 1, 2), quotes_per_day=1000)
>>> tables = generate_day(market, "SYNA", date(2024, 1, 2))
>>> sorted(tables)
[<EventKind.QUOTES: 'quotes'>, <EventKind.TRADES: 'trades'>]
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ConfigError
from ticktensor.schemas import EventKind, schema_for

__all__ = ["SyntheticMarket", "generate_day", "iter_days"]

_NS_PER_SECOND = 1_000_000_000
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SyntheticMarket:
    """Configuration of a synthetic market: instruments, calendar and dynamics.

    Parameters
    ----------
    symbols
        Instrument names.
    start, n_days
        The calendar: ``n_days`` weekdays from ``start`` (weekends skipped).
    session_open, session_close
        Session times in UTC (default 14:30-21:00, the US cash session).
    quotes_per_day, trades_per_day
        Mean number of quote updates / trades per symbol and session.
    base_prices
        Opening price of the first session per symbol; empty means 100.0 for all.
    tick_size
        Price grid; quotes and trades are multiples of it.
    daily_volatility
        Standard deviation of the latent log return over one session (and overnight).
    mean_spread_ticks
        Mean quoted spread in ticks (>= 1); 2% of quotes get a spread 5x wider.
    noise_ticks
        Standard deviation of microstructure noise added to the latent mid, in ticks.
    intraday_shape
        U-shape strength of the arrival intensity: 0 flat; 2 means the open and close
        are three times as busy as midday.
    mean_quote_size, mean_trade_size
        Mean displayed size and mean trade size, in whole units.
    venue
        Venue code written to the ``venue`` column.
    seed
        Root seed; each (symbol, day) draws from its own stream derived from it.
    """

    symbols: tuple[str, ...] = ("SYNA", "SYNB")
    start: date = date(2024, 1, 2)
    n_days: int = 1
    session_open: time = time(14, 30)
    session_close: time = time(21, 0)
    quotes_per_day: float = 50_000.0
    trades_per_day: float = 10_000.0
    base_prices: tuple[float, ...] = ()
    tick_size: float = 0.01
    daily_volatility: float = 0.02
    mean_spread_ticks: float = 1.5
    noise_ticks: float = 0.3
    intraday_shape: float = 2.0
    mean_quote_size: float = 300.0
    mean_trade_size: float = 100.0
    venue: str = "XSYN"
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "symbols", tuple(self.symbols))
        object.__setattr__(self, "base_prices", tuple(float(p) for p in self.base_prices))
        if not self.symbols or len(set(self.symbols)) != len(self.symbols):
            raise ConfigError(f"symbols must be non-empty and unique, got {self.symbols!r}")
        if self.base_prices and len(self.base_prices) != len(self.symbols):
            raise ConfigError(
                f"base_prices has {len(self.base_prices)} entries for {len(self.symbols)} symbols"
            )
        if any(not p > 0 for p in self.base_prices):
            raise ConfigError(f"base_prices must all be > 0, got {self.base_prices!r}")
        if self.n_days < 1:
            raise ConfigError(f"n_days must be >= 1, got {self.n_days}")
        if self.session_open >= self.session_close:
            raise ConfigError(
                f"session_open {self.session_open} must be before session_close "
                f"{self.session_close} (UTC, same day)"
            )
        positive = ("quotes_per_day", "tick_size", "mean_quote_size", "mean_trade_size")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("trades_per_day", "daily_volatility", "noise_ticks", "intraday_shape"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not self.mean_spread_ticks >= 1:
            raise ConfigError(f"mean_spread_ticks must be >= 1, got {self.mean_spread_ticks!r}")

    @property
    def days(self) -> tuple[date, ...]:
        """The session dates: ``n_days`` weekdays from ``start``."""
        out: list[date] = []
        day = self.start
        while len(out) < self.n_days:
            if day.weekday() < 5:
                out.append(day)
            day += timedelta(days=1)
        return tuple(out)

    def session_ns(self, day: date) -> tuple[int, int]:
        """``[open, close)`` of the session on ``day`` in ns since the epoch (UTC)."""

        def ns(t: time) -> int:
            return int(datetime.combine(day, t, tzinfo=UTC).timestamp()) * _NS_PER_SECOND

        return ns(self.session_open), ns(self.session_close)


def _stream(config: SyntheticMarket, *keys: int) -> np.random.Generator:
    return np.random.default_rng([config.seed, *keys])


def _symbol_key(symbol: str) -> int:
    return zlib.crc32(symbol.encode())


def _open_price(config: SyntheticMarket, symbol: str, day: date) -> float:
    """The latent price at the session open: a daily random walk from the base price."""
    index = config.days.index(day)
    base = config.base_prices[config.symbols.index(symbol)] if config.base_prices else 100.0
    steps = _stream(config, _symbol_key(symbol)).normal(0.0, config.daily_volatility, index)
    return float(base * np.exp(steps.sum()))


def _arrivals(rng: np.random.Generator, mean: float, shape: float) -> Floats:
    """Sorted event times in [0, 1) from a Poisson process with U-shaped intensity."""
    n = int(rng.poisson(mean))
    gaps = rng.exponential(size=n + 1)
    uniform = np.cumsum(gaps)[:-1] / gaps.sum()
    # Time change: invert the cumulative intensity of 1 + shape * (2u - 1)^2.
    grid = np.linspace(0.0, 1.0, 4097)
    cumulative = grid + shape * ((2 * grid - 1) ** 3 + 1) / 6
    return np.asarray(np.interp(uniform * cumulative[-1], cumulative, grid), dtype=np.float64)


def _sizes(rng: np.random.Generator, mean: float, n: int) -> Floats:
    sigma = 0.8
    raw = rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, n)
    return np.maximum(1.0, np.round(raw))


def _on_grid(ticks: npt.NDArray[np.int64], tick: float) -> Floats:
    # Round away the binary noise of ticks * tick so prices print as the grid does.
    return np.round(ticks * tick, 10)


def _quotes(
    config: SyntheticMarket, rng: np.random.Generator, open_price: float, frac: Floats
) -> dict[str, Floats | npt.NDArray[np.int64]]:
    n = frac.size
    steps = rng.normal(0.0, 1.0, n) * config.daily_volatility * np.sqrt(np.diff(frac, prepend=0.0))
    latent = open_price * np.exp(np.cumsum(steps))
    center = latent / config.tick_size + rng.normal(0.0, config.noise_ticks, n)
    extra = rng.geometric(1.0 / config.mean_spread_ticks, n) - 1
    extra = np.where(rng.random(n) < 0.02, 5 * extra + 4, extra)
    spread = 1 + extra
    bid_ticks = np.maximum(1, np.floor(center - spread / 2).astype(np.int64))
    ask_ticks = bid_ticks + spread
    bid_sz, ask_sz = (_sizes(rng, config.mean_quote_size, n) for _ in range(2))
    return {
        "bid_px": _on_grid(bid_ticks, config.tick_size),
        "ask_px": _on_grid(ask_ticks, config.tick_size),
        "bid_sz": bid_sz,
        "ask_sz": ask_sz,
        "bid_ct": 1 + rng.poisson(bid_sz / config.mean_quote_size * 3),
        "ask_ct": 1 + rng.poisson(ask_sz / config.mean_quote_size * 3),
    }


def _header(
    config: SyntheticMarket, rng: np.random.Generator, symbol: str, ts: npt.NDArray[np.int64]
) -> dict[str, pa.Array]:
    n = ts.size
    latency = rng.exponential(50_000.0, n).astype(np.int64) + 5_000  # 5 us + ~50 us
    return {
        "ts_event": pa.array(ts, pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
        "ts_recv": pa.array(ts + latency, pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
        "symbol": pa.repeat(pa.scalar(symbol, pa.string()), n),
        "venue": pa.repeat(pa.scalar(config.venue, pa.string()), n),
        "sequence": pa.array(np.arange(1, n + 1, dtype=np.uint64)),
    }


def generate_day(
    config: SyntheticMarket,
    symbol: str,
    day: date,
    rng: np.random.Generator | int | None = None,
) -> dict[EventKind, pa.Table]:
    """Generate one session of quotes and trades for one symbol.

    Parameters
    ----------
    config
        The market.
    symbol, day
        Which instrument and session; both must be in ``config``.
    rng
        A generator or seed; by default a stream derived from ``(config.seed, symbol,
        day)``, so any (symbol, day) is reproducible on its own, in any order.

    Returns
    -------
    dict
        ``{EventKind.QUOTES: quotes, EventKind.TRADES: trades}``, each with the
        canonical schema, sorted by ``ts_event`` within ``[open, close)`` of the session.
    """
    if symbol not in config.symbols:
        raise ConfigError(f"symbol {symbol!r} is not one of {config.symbols}")
    if day not in config.days:
        raise ConfigError(f"day {day} is not a session of this market: {config.days}")
    if not isinstance(rng, np.random.Generator):
        rng = (
            _stream(config, _symbol_key(symbol), day.toordinal())
            if rng is None
            else (np.random.default_rng(rng))
        )
    open_ns, close_ns = config.session_ns(day)
    length = close_ns - open_ns

    # The first quote sits at the open so every trade has a quote in force.
    q_frac = np.concatenate(
        [[0.0], _arrivals(rng, max(config.quotes_per_day - 1, 0.0), config.intraday_shape)]
    )
    q_ts = open_ns + np.floor(q_frac * length).astype(np.int64)
    book = _quotes(config, rng, _open_price(config, symbol, day), q_frac)
    quotes = {**_header(config, rng, symbol, q_ts), **{k: pa.array(v) for k, v in book.items()}}

    t_frac = _arrivals(rng, config.trades_per_day, config.intraday_shape)
    t_ts = open_ns + np.floor(t_frac * length).astype(np.int64)
    prevailing = np.searchsorted(q_ts, t_ts, side="right") - 1
    bid_sz, ask_sz = book["bid_sz"][prevailing], book["ask_sz"][prevailing]
    buy = rng.random(t_ts.size) < 0.5 + 0.3 * (bid_sz - ask_sz) / (bid_sz + ask_sz)
    header = _header(config, rng, symbol, t_ts)
    trades = {
        **header,
        "price": pa.array(np.where(buy, book["ask_px"][prevailing], book["bid_px"][prevailing])),
        "size": pa.array(_sizes(rng, config.mean_trade_size, t_ts.size)),
        "side": pa.array(np.where(buy, 1, -1).astype(np.int8)),
        "trade_id": pc.binary_join_element_wise(
            f"{symbol}-{day:%Y%m%d}-", pc.cast(header["sequence"], pa.string()), ""
        ),
    }
    return {
        kind: pa.Table.from_pydict(columns).select(schema_for(kind).names).cast(schema_for(kind))
        for kind, columns in ((EventKind.QUOTES, quotes), (EventKind.TRADES, trades))
    }


def iter_days(config: SyntheticMarket) -> Iterator[tuple[str, date, dict[EventKind, pa.Table]]]:
    """Generate every (symbol, day) of the market lazily, days outer, symbols inner."""
    for day in config.days:
        for symbol in config.symbols:
            yield symbol, day, generate_day(config, symbol, day)
