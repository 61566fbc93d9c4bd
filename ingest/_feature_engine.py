"""The feature engine: a catalogue of named features, evaluated as polars expressions per clock."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from ticktensor.errors import ConfigError
from ticktensor.schemas import MBP_DEPTH, EventKind, FeatureSpec, LabelSpec, parse_duration_ns

from ._feature_rows import TRADE_QUANTITIES, Rows

__all__ = ["FeatureArrays", "check_spec", "compute", "known_features"]

_NS_PER_DAY = 86_400 * 1_000_000_000
_ALL = frozenset({"quotes", "trades", "bars", "mbp10", "ohlcv"})
_BOOK = frozenset({"quotes", "mbp10", "trades", "bars"})  # trades/bars: with quotes given
_BARS = frozenset({"bars", "ohlcv"})


class FeatureArrays(NamedTuple):
    """Features and labels of one series, row-aligned with ``ts``."""

    ts: npt.NDArray[np.int64]
    """Row time, ns since the epoch (UTC): the event time, or a bar's close time."""
    values: npt.NDArray[np.float32]
    """Feature matrix ``[n, F]``."""
    labels: npt.NDArray[np.float32]
    """Label matrix ``[n, L]``; NaN where the horizon reaches past the data."""
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]


Param = int | tuple[Literal["rows", "ns"], int] | None
Builder = Callable[[Rows, Param], pl.Expr]


@dataclass(frozen=True)
class _Entry:
    clocks: frozenset[str]
    param: Literal["none", "rows", "window"]
    default: int
    build: Builder


def _q(r: Rows, a: str) -> pl.Expr:
    return r.column(a)


def _ret(r: Rows, n: Param, source: str = "px") -> pl.Expr:
    px = r.column(source)
    return (px / px.shift(n if isinstance(n, int) else 1)).fill_null(1.0)


def _depth_imbalance(r: Rows, n: Param) -> pl.Expr:
    k = n if isinstance(n, int) else MBP_DEPTH
    if not 1 <= k <= MBP_DEPTH:
        raise ConfigError(f"depth_imbalance_{k}: levels must be 1..{MBP_DEPTH}")
    bid = pl.sum_horizontal(r.column(f"bid_sz_{i:02d}").fill_null(0.0) for i in range(k))
    ask = pl.sum_horizontal(r.column(f"ask_sz_{i:02d}").fill_null(0.0) for i in range(k))
    return _ratio(bid - ask, bid + ask)


def _ratio(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    return pl.when(den == 0).then(0.0).otherwise(num / den)


def _window(r: Rows, quantity: str, w: Param) -> pl.Expr:
    """Sum of ``quantity`` over the last N rows, or over events in ``(ts - d, ts]``."""
    unit, size = w if isinstance(w, tuple) else ("rows", 1)
    if unit == "rows" and size == 1:
        return r.column(quantity)
    cum = r.column(f"cum_{quantity}")
    if unit == "rows":
        return cum - cum.shift(size, fill_value=0.0)
    return cum - r.column(f"cum_{quantity}@{size}")


def _trade(quantity: str) -> _Entry:
    clocks = _ALL - {"ohlcv"} if quantity == "signed_volume" else _ALL
    return _Entry(clocks, "window", 1, lambda r, w: _window(r, quantity, w))


def _vwap_distance(r: Rows, w: Param) -> pl.Expr:
    volume, dollar = _window(r, "volume", w), _window(r, "dollar_volume", w)
    # px / vwap - 1 with vwap = dollar / volume; 0 while nothing has traded in the window.
    return pl.when(dollar == 0).then(0.0).otherwise(r.column("px") * volume / dollar - 1.0)


def _volatility(r: Rows, n: Param) -> pl.Expr:
    squared = _ret(r, 1).log() ** 2
    return squared.rolling_sum(n if isinstance(n, int) else 20, min_samples=1).sqrt()


def _column(name: str, clocks: frozenset[str]) -> _Entry:
    return _Entry(clocks, "none", 0, lambda r, _: r.column(name))


CATALOGUE: dict[str, _Entry] = {
    "mid": _column("mid", _BOOK),
    "bid_px": _column("bid_px", _BOOK),
    "ask_px": _column("ask_px", _BOOK),
    "price": _column("price", frozenset({"trades"})),
    **{c: _column(c, _BARS) for c in ("open", "high", "low", "close", "vwap")},
    "spread": _Entry(_BOOK, "none", 0, lambda r, _: _q(r, "ask_px") - _q(r, "bid_px")),
    "spread_bps": _Entry(
        _BOOK, "none", 0, lambda r, _: (_q(r, "ask_px") - _q(r, "bid_px")) / _q(r, "mid") * 1e4
    ),
    "imbalance": _Entry(
        _BOOK,
        "none",
        0,
        lambda r, _: _ratio(_q(r, "bid_sz") - _q(r, "ask_sz"), _q(r, "bid_sz") + _q(r, "ask_sz")),
    ),
    "depth_imbalance": _Entry(frozenset({"mbp10"}), "rows", MBP_DEPTH, _depth_imbalance),
    "log1p_bid_sz": _Entry(_BOOK, "none", 0, lambda r, _: _q(r, "bid_sz").log1p()),
    "log1p_ask_sz": _Entry(_BOOK, "none", 0, lambda r, _: _q(r, "ask_sz").log1p()),
    "return": _Entry(_ALL, "rows", 1, lambda r, n: _ret(r, n) - 1.0),
    "log_return": _Entry(_ALL, "rows", 1, lambda r, n: _ret(r, n).log()),
    "mid_log_return": _Entry(_BOOK, "none", 0, lambda r, _: _ret(r, 1, "mid").log()),
    "volatility": _Entry(_ALL, "rows", 20, _volatility),
    **{q: _trade(q) for q in TRADE_QUANTITIES},
    "vwap_distance": _Entry(_ALL, "window", 1, _vwap_distance),
    "range_bps": _Entry(
        _BARS, "none", 0, lambda r, _: (_q(r, "high") - _q(r, "low")) / _q(r, "close") * 1e4
    ),
    "time_of_day": _Entry(_ALL, "none", 0, lambda r, _: (_q(r, "ts") % _NS_PER_DAY) / _NS_PER_DAY),
    "last_trade_signed_size": _Entry(
        frozenset({"quotes", "mbp10", "trades"}),
        "none",
        0,
        lambda r, _: _q(r, "last_trade_signed_size"),
    ),
    "trades_last_1s": _Entry(
        _ALL, "none", 0, lambda r, _: _window(r, "trade_count", ("ns", 1_000_000_000))
    ),
}
"""Every feature by base name; ``docs/features.md`` gives each formula."""

_SUFFIX = re.compile(r"(?P<base>.+)_(?P<param>\d+(?:ns|us|ms|s|m|h|d)?)")


def _rows(n: int) -> Param:
    return ("rows", n)


def _resolve(name: str, clock: str) -> tuple[_Entry, Param] | None:
    """The catalogue entry and parameter a feature name stands for on ``clock``, if any."""
    entry, param = CATALOGUE.get(name), None
    if entry is None and (match := _SUFFIX.fullmatch(name)):
        entry, text = CATALOGUE.get(match["base"]), match["param"]
        if entry is None or entry.param == "none":
            return None
        if text.isdigit():
            if int(text) < 1:
                return None
            param = int(text) if entry.param == "rows" else _rows(int(text))
        elif entry.param == "window":
            param = ("ns", parse_duration_ns(text))
        else:
            return None
    if entry is None or clock not in entry.clocks:
        return None
    return entry, param


def known_features(clock: str) -> tuple[str, ...]:
    """The feature names available on ``clock``, with their parameter patterns."""
    suffix = {"none": "", "rows": "[_N]", "window": "[_N|_<duration>]"}
    return tuple(f"{n}{suffix[e.param]}" for n, e in CATALOGUE.items() if clock in e.clocks)


def check_spec(spec: FeatureSpec) -> None:
    """Raise :class:`ConfigError` unless every feature and label source exists on the clock."""
    known = ", ".join(known_features(spec.clock))
    if unknown := [f for f in spec.features if _resolve(f, spec.clock) is None]:
        raise ConfigError(
            f"unknown feature(s) {unknown} for clock {spec.clock!r}; known: {known} "
            f"(N: a row count, e.g. log_return_5; duration: e.g. volume_1s, volume_500ms)"
        )
    if bad := [lb.source for lb in spec.labels if _resolve(lb.source, spec.clock) is None]:
        raise ConfigError(
            f"unknown label source(s) {bad} for clock {spec.clock!r}; any feature name is a "
            f"source: {known}"
        )


def _label(
    label: LabelSpec, source: npt.NDArray[np.float64], ts: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    n = source.size
    unit, horizon = label.horizon
    if unit == "rows":
        future = np.arange(n) + horizon
    else:
        # The last row at or before ts + horizon; unknown once that passes the data's end.
        future = np.searchsorted(ts, ts + horizon, side="right") - 1
        future[ts + horizon > ts[-1]] = n
    known = future < n
    ahead = np.full(n, np.nan)
    ahead[known] = source[future[known]]
    with np.errstate(divide="ignore", invalid="ignore"):
        if label.kind == "forward_log_return":
            return np.asarray(np.log(ahead / source), dtype=np.float64)
        if label.kind == "forward_return":
            return ahead / source - 1.0
    return ahead


def compute(events: Mapping[EventKind, pa.Table], spec: FeatureSpec) -> FeatureArrays:
    """Evaluate ``spec`` on one symbol's session of events (see ``features.compute_features``)."""
    check_spec(spec)
    rows = Rows(spec.clock, events, spec.bar_rule)
    exprs = []
    for name in spec.features:
        resolved = _resolve(name, spec.clock)
        assert resolved is not None  # check_spec passed
        exprs.append(resolved[0].build(rows, resolved[1]).cast(pl.Float64).alias(name))
    for j, label in enumerate(spec.labels):
        resolved = _resolve(label.source, spec.clock)
        assert resolved is not None
        exprs.append(resolved[0].build(rows, resolved[1]).cast(pl.Float64).alias(f"_label_{j}"))
    ts = rows.frame["ts"].to_numpy().astype(np.int64, copy=False)
    out = rows.frame.lazy().select(exprs).collect()
    values = np.empty((rows.height, len(spec.features)), dtype=np.float32)
    labels = np.empty((rows.height, len(spec.labels)), dtype=np.float32)
    # The store keeps float32: a value beyond its range becomes +/-inf, which the ingest
    # report counts (see ``overflowed``), instead of a warning per cast.
    with np.errstate(over="ignore"):
        for j, name in enumerate(spec.features):
            values[:, j] = out[name].to_numpy()
        for j, label in enumerate(spec.labels):
            if rows.height:
                raw = out[f"_label_{j}"].to_numpy().astype(np.float64)
                labels[:, j] = _label(label, raw, ts)
    return FeatureArrays(ts, values, labels, spec.features, spec.label_names)


def overflowed(features: FeatureArrays) -> int:
    """Values of ``features`` (features and labels) that are +/-inf: beyond float32's
    range (or infinite already in the events)."""
    return int(np.isinf(features.values).sum() + np.isinf(features.labels).sum())
