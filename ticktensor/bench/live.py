"""``ticktensor bench live``: live features per tick against recomputing them the obvious ways.

One run measures, on generated quotes and trades: the latency of each tick through the
C++ API for a 10-feature spec on one core (p50, p99, p99.9); events per second through
the batch API on a wide replay (many symbols, one core); and the same features computed
per tick by a polars recompute over a trailing window and by a Python loop keeping numpy
rings, each as a ratio to the live engine.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ticktensor.ingest import SyntheticMarket, compute_features, generate_day
from ticktensor.live import EventBatch, LiveEngine, Quote, batch_of_tables
from ticktensor.schemas import EventKind, FeatureSpec

__all__ = ["LIVE_SPEC", "LiveOptions", "format_live", "run_live"]

LIVE_SPEC = FeatureSpec(
    (
        "mid_log_return", "spread_bps", "imbalance", "log1p_bid_sz", "log1p_ask_sz",
        "volatility_20", "signed_volume_1s", "trade_count_100", "vwap_distance_1s", "time_of_day",
    ),
    version=2,
)  # fmt: skip
"""The 10-feature spec of the latency figures (quotes clock)."""

GOALS = {"p50_us": 1.0, "p99_us": 5.0, "events_per_s": 1e6, "vs_polars": 100.0}


@dataclass(frozen=True)
class LiveOptions:
    """Sizes of ``bench live``."""

    latency_quotes: int = 200_000
    """Quotes of the one symbol whose ticks are timed (and a fifth as many trades)."""
    wide_symbols: int = 1_000
    wide_quotes: int = 2_000
    """Quotes per symbol of the wide replay (and a fifth as many trades)."""
    polars_ticks: int = 200
    polars_window: int = 2_000
    """Events the polars baseline recomputes the features over, per tick."""
    loop_ticks: int = 50_000
    repeats: int = 3

    @classmethod
    def quick(cls) -> LiveOptions:
        return cls(latency_quotes=50_000, wide_symbols=200, polars_ticks=50, loop_ticks=10_000)


def _events(symbols: int, quotes: int, seed: int = 0) -> dict[EventKind, pa.Table]:
    market = SyntheticMarket(
        symbols=tuple(f"S{k:05d}" for k in range(symbols)),
        quotes_per_day=quotes,
        trades_per_day=max(quotes // 5, 1),
        seed=seed,
    )
    days = [generate_day(market, s, market.days[0]) for s in market.symbols]
    return {k: pa.concat_tables([d[k] for d in days]) for k in (EventKind.QUOTES, EventKind.TRADES)}


def _latency(batch: EventBatch, repeats: int) -> dict[str, float]:
    runs = [LiveEngine(LIVE_SPEC).push_timed(batch) for _ in range(repeats)]
    ns = min(runs, key=lambda r: float(np.percentile(r, 50)))
    rows = batch.kind == 0
    return {
        "p50_us": float(np.percentile(ns, 50)) / 1e3,
        "p99_us": float(np.percentile(ns, 99)) / 1e3,
        "p999_us": float(np.percentile(ns, 99.9)) / 1e3,
        "row_p50_us": float(np.percentile(ns[rows], 50)) / 1e3,
        "row_p99_us": float(np.percentile(ns[rows], 99)) / 1e3,
        "mean_us": float(ns.mean()) / 1e3,
        "events": float(ns.size),
    }


def _python_push(batch: EventBatch, n: int) -> float:
    """Mean µs of one ``LiveEngine.push`` call from Python (quotes only)."""
    engine = LiveEngine(LIVE_SPEC)
    name = batch.symbols[0]
    quotes = []
    for k in np.flatnonzero(batch.kind == 0)[:n].tolist():
        bid, ask, bid_sz, ask_sz = batch.values[k, :4].tolist()
        quotes.append(Quote(name, int(batch.ts[k]), bid, ask, bid_sz, ask_sz))
    start = time.perf_counter()
    for q in quotes:
        engine.push(q)
    return (time.perf_counter() - start) / len(quotes) * 1e6


def _throughput(batch: EventBatch, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        engine = LiveEngine(LIVE_SPEC, batch.symbols)
        start = time.perf_counter()
        engine.push_batch(batch)
        best = min(best, time.perf_counter() - start)
    return len(batch) / best


def _polars_recompute(events: dict[EventKind, pa.Table], ticks: int, window: int) -> float:
    """Mean µs per tick of recomputing the spec over the trailing ``window`` quotes (and the
    trades in their time span) with polars, keeping the last row: the obvious serving code."""
    quotes, trades = events[EventKind.QUOTES], events[EventKind.TRADES]
    q_ts = quotes.column("ts_event").cast(pa.int64()).to_numpy()
    t_ts = trades.column("ts_event").cast(pa.int64()).to_numpy()
    ends = np.linspace(window, quotes.num_rows, ticks, dtype=np.int64)
    start = time.perf_counter()
    for end in ends.tolist():
        lo_t = int(np.searchsorted(t_ts, q_ts[end - window], side="left"))
        hi_t = int(np.searchsorted(t_ts, q_ts[end - 1], side="right"))
        part = {
            EventKind.QUOTES: quotes.slice(end - window, window),
            EventKind.TRADES: trades.slice(lo_t, hi_t - lo_t),
        }
        compute_features(part, LIVE_SPEC).values[-1]
    return (time.perf_counter() - start) / ticks * 1e6


def _numpy_loop(batch: EventBatch, ticks: int) -> float:
    """Mean µs per event of a Python loop keeping the spec's state in numpy rings and deques
    (the incremental code a user writes without a native engine)."""
    sq = np.zeros(20)
    rows_cum = deque([0.0] * 101, maxlen=101)
    trades: deque[tuple[int, float, float, float]] = deque()
    count = volume = dollar = 0.0
    prev_mid = math.nan
    i = 0
    n = min(ticks, len(batch))
    start = time.perf_counter()
    for k in range(n):
        ts = int(batch.ts[k])
        a, b, c, d = batch.values[k, :4]
        if batch.kind[k] == 1:
            trades.append((ts, c * b, b, a * b))
            count += 1.0
            volume += b
            dollar += a * b
            continue
        while trades and trades[0][0] <= ts - 1_000_000_000:
            trades.popleft()
        window = np.asarray(trades, dtype=np.float64).reshape(-1, 4)
        mid = (a + b) / 2
        r = math.log(mid / prev_mid) if i else 0.0
        sq[i % 20] = r * r
        vol_1s, dollar_1s = window[:, 2].sum(), window[:, 3].sum()
        rows_cum.append(count)
        np.array(
            [
                r,
                (b - a) / mid * 1e4,
                (c - d) / (c + d) if c + d else 0.0,
                math.log1p(c),
                math.log1p(d),
                math.sqrt(sq.sum()),
                window[:, 1].sum(),
                count - rows_cum[0],
                mid * vol_1s / dollar_1s - 1.0 if dollar_1s else 0.0,
                (ts % 86_400_000_000_000) / 86_400_000_000_000,
            ]
        )
        prev_mid = mid
        i += 1
    return (time.perf_counter() - start) / n * 1e6


def run_live(options: LiveOptions) -> dict[str, Any]:
    """Every figure of ``bench live``, in one run."""
    one = _events(1, options.latency_quotes)
    one_batch = batch_of_tables(one, "quotes")
    latency = _latency(one_batch, options.repeats)
    wide = batch_of_tables(_events(options.wide_symbols, options.wide_quotes, seed=1), "quotes")
    events_per_s = _throughput(wide, options.repeats)
    polars_us = _polars_recompute(one, options.polars_ticks, options.polars_window)
    loop_us = _numpy_loop(one_batch, options.loop_ticks)
    python_push_us = _python_push(one_batch, min(options.loop_ticks, 20_000))
    live_us = latency["mean_us"]
    figures = {
        **latency,
        "events_per_s": events_per_s,
        "wide_events": float(len(wide)),
        "wide_symbols": float(options.wide_symbols),
        "polars_us_per_tick": polars_us,
        "numpy_loop_us_per_event": loop_us,
        "python_push_us": python_push_us,
        "vs_polars": polars_us / live_us,
        "vs_numpy_loop": loop_us / live_us,
    }
    met = {
        "p50_us": figures["p50_us"] <= GOALS["p50_us"],
        "p99_us": figures["p99_us"] <= GOALS["p99_us"],
        "events_per_s": events_per_s >= GOALS["events_per_s"],
        "vs_polars": figures["vs_polars"] >= GOALS["vs_polars"],
    }
    return {"spec": LIVE_SPEC.to_dict(), "figures": figures, "goals": GOALS, "met": met}


def format_live(doc: dict[str, Any]) -> str:
    """The figures of :func:`run_live` as text lines."""
    f, met = doc["figures"], doc["met"]

    def mark(key: str) -> str:
        return "met" if met[key] else "MISSED"

    return "\n".join(
        [
            f"spec: {len(doc['spec']['features'])} features on the quotes clock: "
            + ", ".join(doc["spec"]["features"]),
            f"latency per tick, C++ API, one core ({f['events']:.0f} events, one symbol): "
            f"p50 {f['p50_us']:.3f} us ({mark('p50_us')}: <= {GOALS['p50_us']}), "
            f"p99 {f['p99_us']:.3f} us ({mark('p99_us')}: <= {GOALS['p99_us']}), "
            f"p99.9 {f['p999_us']:.3f} us, mean {f['mean_us']:.3f} us; "
            f"ticks giving a row: p50 {f['row_p50_us']:.3f} us, p99 {f['row_p99_us']:.3f} us",
            f"wide replay, batch API, one core ({f['wide_events']:.0f} events of "
            f"{f['wide_symbols']:.0f} symbols): {f['events_per_s'] / 1e6:.2f} M events/s "
            f"({mark('events_per_s')}: >= 1 M)",
            f"polars recompute over a trailing window: {f['polars_us_per_tick']:.0f} us per tick "
            f"= {f['vs_polars']:.0f}x the live mean ({mark('vs_polars')}: >= 100x)",
            f"numpy incremental loop in Python: {f['numpy_loop_us_per_event']:.2f} us per event "
            f"= {f['vs_numpy_loop']:.0f}x the live mean",
            f"one LiveEngine.push from Python (a Quote object per call): "
            f"{f['python_push_us']:.2f} us",
        ]
    )
