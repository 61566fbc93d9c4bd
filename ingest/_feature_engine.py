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
from ticktensor.kernels import stack_columns_f32
from ticktensor.schemas import MBP_DEPTH, EventKind, FeatureSpec, LabelSpec, parse_duration_ns

from ._feature_rows import SERIES, TRADE_QUANTITIES, Rows
from ._symbols import keyed_symbols, ranks_of
from .bars import _ranges

__all__ = [
    "FIXED_ORDER_VERSION",
    "FeatureArrays",
    "SymbolFeatures",
    "check_spec",
    "compute",
    "compute_by_symbol",
    "feature_parameter",
    "known_features",
]

_NS_PER_DAY = 86_400 * 1_000_000_000

FIXED_ORDER_VERSION = 2
"""The first feature spec version whose window sums over rows (``volatility_N``) add the
window's terms oldest first, one by one: the order ``ticktensor.live`` repeats tick by
tick. Earlier versions keep polars' rolling sum, so their stores keep what they hold."""
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


class SymbolFeatures(NamedTuple):
    """Features and labels of many symbols at once, rows sorted by (symbol, ts)."""

    symbols: tuple[str, ...]
    """Every symbol of the events, sorted; some may have no rows."""
    offsets: npt.NDArray[np.int64]
    """``[len(symbols) + 1]``: symbol ``i`` holds rows ``offsets[i]:offsets[i + 1]``."""
    features: FeatureArrays
    """The rows of every symbol, one symbol after the other."""


Param = int | tuple[Literal["rows", "ns"], int] | None
Builder = Callable[[Rows, Param], pl.Expr]


def _never(_: Param) -> bool:
    return False


def _over_rows(w: Param) -> bool:
    """A trade window of more than one row reads earlier rows; a duration window reads
    columns joined as of each row's time, and one row is the row itself."""
    return isinstance(w, tuple) and w[0] == "rows" and w[1] > 1


@dataclass(frozen=True)
class _Entry:
    clocks: frozenset[str]
    param: Literal["none", "rows", "window"]
    default: int
    build: Builder
    #: Whether the formula with this parameter reads other rows than its own (a shift,
    #: a cumulative or rolling sum) without keeping to its symbol itself: computed per
    #: symbol when the rows hold many.
    reads_rows: Callable[[Param], bool] = _never


def _q(r: Rows, a: str) -> pl.Expr:
    return r.column(a)


def _ret(r: Rows, n: Param, source: str = "px") -> pl.Expr:
    px = r.column(source)
    return (px / r.shift(px, n if isinstance(n, int) else 1)).fill_null(1.0)


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
    return _Entry(clocks, "window", 1, lambda r, w: _window(r, quantity, w), _over_rows)


def _vwap_distance(r: Rows, w: Param) -> pl.Expr:
    volume, dollar = _window(r, "volume", w), _window(r, "dollar_volume", w)
    # px / vwap - 1 with vwap = dollar / volume; 0 while nothing has traded in the window.
    return pl.when(dollar == 0).then(0.0).otherwise(r.column("px") * volume / dollar - 1.0)


def _log_ret(r: Rows, n: Param) -> pl.Expr:
    """``log`` of :func:`_ret`, a column of the rows shared by the features that use it."""
    rows = n if isinstance(n, int) else 1
    return r.shared(f"_log_return_{rows}", _ret(r, rows).log())


def _volatility(r: Rows, n: Param) -> pl.Expr:
    rows = n if isinstance(n, int) else 20
    if not r.fixed_order:
        squared = _log_ret(r, 1) ** 2
        return r.per_series(squared.rolling_sum(rows, min_samples=1)).sqrt()
    # ((0 + r2[i-N+1]) + r2[i-N+2]) + ... + r2[i], rows before the series' start adding 0:
    # the sum a ring of the last N terms gives when it is re-added oldest first. numpy adds
    # one shifted copy per term in place (the same additions, in the same order, as the
    # polars expression of the shifts, at a fraction of its cost).
    name = f"_volatility_{rows}"
    if name not in r.frame.columns:
        r.shared("_squared_log_return_1", _log_ret(r, 1) * _log_ret(r, 1))
        terms = r.frame["_squared_log_return_1"].to_numpy().astype(np.float64, copy=False)
        total = np.zeros(terms.size)
        if r.by is None:
            for k in range(min(rows, terms.size + 1) - 1, 0, -1):
                total[k:] += terms[: terms.size - k]
        else:
            series = r.frame[r.by].to_numpy()
            starts = np.flatnonzero(np.diff(series)) + 1
            first = np.zeros(terms.size, dtype=np.int64)
            first[starts] = starts
            position = np.arange(terms.size) - np.maximum.accumulate(first)
            for k in range(min(rows, terms.size + 1) - 1, 0, -1):
                total[k:] += np.where(position[k:] >= k, terms[: terms.size - k], 0.0)
        total += terms
        r.frame = r.frame.with_columns(pl.Series(name, np.sqrt(total), pl.Float64))
    return pl.col(name)


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
    "log_return": _Entry(_ALL, "rows", 1, _log_ret),
    "mid_log_return": _Entry(_BOOK, "none", 0, lambda r, _: _ret(r, 1, "mid").log()),
    "volatility": _Entry(_ALL, "rows", 20, _volatility),
    **{q: _trade(q) for q in TRADE_QUANTITIES},
    "vwap_distance": _Entry(_ALL, "window", 1, _vwap_distance, _over_rows),
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


def feature_parameter(name: str, clock: str) -> tuple[str, Param]:
    """The catalogue name and parameter ``name`` stands for on ``clock``: ``("volume",
    ("ns", 10**9))`` for ``volume_1s``, ``("log_return", 5)`` for ``log_return_5``,
    ``("volatility", None)`` for the default. Raises :class:`ConfigError` if unknown."""
    resolved = _resolve(name, clock)
    if resolved is None:
        raise ConfigError(f"unknown feature {name!r} for clock {clock!r}")
    entry, param = resolved
    base = next(base for base, known in CATALOGUE.items() if known is entry)
    return base, param


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


def _ahead_in_rows(
    source: npt.NDArray[np.float64], horizon: int, offsets: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """``source`` ``horizon`` rows later; NaN where that passes the row's symbol's last row."""
    n = source.size
    ahead = np.empty(n)
    ahead[: max(n - horizon, 0)] = source[horizon:]
    # NaN on each symbol's last ``horizon`` rows: among them every row from n - horizon
    # on, which the copy leaves unset.
    last = np.minimum(np.diff(offsets), horizon)
    ahead[_ranges(offsets[1:] - last, last)] = np.nan
    return ahead


def _ahead_in_time(
    source: npt.NDArray[np.float64],
    horizon: int,
    ts: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """``source`` at the last row at or before ``ts + horizon`` of the row's symbol; NaN
    once that time passes the symbol's last row."""
    ahead = np.full(source.size, np.nan)
    for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        if hi > lo:
            part = ts[lo:hi]
            found = np.searchsorted(part, part + horizon, side="right") - 1 + lo
            known = part + horizon <= part[-1]
            ahead[lo:hi][known] = source[found[known]]
    return ahead


def _label(
    label: LabelSpec,
    source: npt.NDArray[np.float64],
    ts: npt.NDArray[np.int64],
    offsets: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """``label`` of every row; a horizon never reaches past its symbol's rows (``offsets``)."""
    unit, horizon = label.horizon
    if unit == "rows":
        ahead = _ahead_in_rows(source, horizon, offsets)
    else:
        ahead = _ahead_in_time(source, horizon, ts, offsets)
    with np.errstate(divide="ignore", invalid="ignore"):
        if label.kind == "forward_log_return":
            return np.asarray(np.log(ahead / source), dtype=np.float64)
        if label.kind == "forward_return":
            return ahead / source - 1.0
    return ahead


def compute(events: Mapping[EventKind, pa.Table], spec: FeatureSpec) -> FeatureArrays:
    """Evaluate ``spec`` on one symbol's session of events (see ``features.compute_features``)."""
    check_spec(spec)
    fixed = spec.version >= FIXED_ORDER_VERSION
    return _evaluate(Rows(spec.clock, events, spec.bar_rule, fixed_order=fixed), spec)[0]


def compute_by_symbol(events: Mapping[EventKind, pa.Table], spec: FeatureSpec) -> SymbolFeatures:
    """Evaluate ``spec`` on a session of many symbols at once, each as :func:`compute` would
    on its own (see ``features.compute_session_features``)."""
    check_spec(spec)
    keyed, names = keyed_symbols([table.column("symbol") for table in events.values()])
    numbered, used = {}, set()
    for (kind, table), of_kind in zip(events.items(), keyed, strict=True):
        series = ranks_of(of_kind)
        numbered[kind] = table.append_column(SERIES, pa.array(series))
        if series.size:
            used.update({int(series.min()), int(series.max())})
    # One symbol: its own series, without the per-symbol windows (the same rows).
    alone = len(used) == 1
    rows = Rows(
        spec.clock,
        numbered,
        spec.bar_rule,
        by_symbol=not alone,
        fixed_order=spec.version >= FIXED_ORDER_VERSION,
    )
    arrays, series = _evaluate(rows, spec)
    if alone:
        series = np.full(series.shape, used.pop(), dtype=np.uint32)
    offsets = np.searchsorted(series, np.arange(len(names) + 1, dtype=np.uint32)).astype(np.int64)
    return SymbolFeatures(tuple(names), offsets, arrays)


def _evaluate(rows: Rows, spec: FeatureSpec) -> tuple[FeatureArrays, npt.NDArray[np.uint32]]:
    """The features and labels of ``rows``, and the series number of each row."""
    exprs = []
    sources = [(name, name) for name in spec.features]
    sources += [(label.source, f"_label_{j}") for j, label in enumerate(spec.labels)]
    for name, alias in sources:
        resolved = _resolve(name, spec.clock)
        assert resolved is not None  # check_spec passed
        entry, param = resolved
        expr = entry.build(rows, param)
        if entry.reads_rows(param):
            expr = rows.per_series(expr)
        exprs.append(expr.cast(pl.Float64).alias(alias))
    ts = rows.frame["ts"].to_numpy().astype(np.int64, copy=False)
    if rows.by is None:
        series = np.zeros(rows.height, dtype=np.uint32)
    else:
        series = rows.frame[rows.by].to_numpy().astype(np.uint32, copy=False)
    out = rows.frame.select(exprs)
    labels = np.empty((rows.height, len(spec.labels)), dtype=np.float32)
    offsets = np.flatnonzero(np.diff(series)) + 1
    offsets = np.concatenate([[0], offsets, [rows.height]]).astype(np.int64)
    # The store keeps float32: a value beyond its range becomes +/-inf, which the ingest
    # report counts per symbol, instead of a warning per cast.
    with np.errstate(over="ignore"):
        values = stack_columns_f32([out[name].to_numpy() for name in spec.features], rows.height)
        for j, label in enumerate(spec.labels):
            if rows.height:
                raw = out[f"_label_{j}"].to_numpy().astype(np.float64, copy=False)
                labels[:, j] = _label(label, raw, ts, offsets)
    return FeatureArrays(ts, values, labels, spec.features, spec.label_names), series
