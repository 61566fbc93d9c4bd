"""A minimal point-in-time feature builder: quotes (+ trades) to a float32 matrix and labels.

Each quote row becomes one feature row. Trades are joined as of the quote's time: a
row sees only trades with ``ts_event <= `` its own ``ts_event``. Labels look ahead
only through their declared horizon.

Features (names as in :data:`FEATURES`):

``mid_log_return``
    ``log(mid[i] / mid[i-1])`` with ``mid = (bid_px + ask_px) / 2``; 0 for the first row.
``spread_bps``
    ``(ask_px - bid_px) / mid * 1e4``.
``imbalance``
    ``(bid_sz - ask_sz) / (bid_sz + ask_sz)`` in [-1, 1]; 0 when both sizes are 0.
``log1p_bid_sz``, ``log1p_ask_sz``
    ``log1p`` of the sizes at the best bid / ask.
``time_of_day``
    Seconds since midnight UTC divided by 86,400, in [0, 1).
``last_trade_signed_size``
    ``side * size`` of the latest trade at or before the row (0 if none yet).
``trades_last_1s``
    Number of trades in ``(ts - 1 s, ts]``.

Quote rows with a null price or size yield NaN features; validate first.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.errors import ConfigError, SchemaError
from ticktensor.schemas import FeatureSpec, LabelSpec

__all__ = ["DEMO_FEATURE_SPEC", "FEATURES", "FeatureArrays", "build_features", "demo_feature_spec"]

FEATURES: tuple[str, ...] = (
    "mid_log_return",
    "spread_bps",
    "imbalance",
    "log1p_bid_sz",
    "log1p_ask_sz",
    "time_of_day",
    "last_trade_signed_size",
    "trades_last_1s",
)
"""Every feature this builder computes, in its default order."""

LABEL_SOURCES: tuple[str, ...] = ("mid", "bid_px", "ask_px")

_NS_PER_DAY = 86_400 * 1_000_000_000
_NS_PER_SECOND = 1_000_000_000
Floats = npt.NDArray[np.float64]


class FeatureArrays(NamedTuple):
    """Features and labels of one series, row-aligned with ``ts``."""

    ts: npt.NDArray[np.int64]
    """``ts_event`` of each row, ns since the epoch (UTC)."""
    values: npt.NDArray[np.float32]
    """Feature matrix ``[n, F]``."""
    labels: npt.NDArray[np.float32]
    """Label matrix ``[n, L]``; NaN where the horizon reaches past the data."""
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]


def demo_feature_spec(horizon_rows: int = 10) -> FeatureSpec:
    """All :data:`FEATURES` and one label: the forward log return of mid over ``horizon_rows``."""
    label = LabelSpec(
        f"mid_fwd_log_return_{horizon_rows}",
        source="mid",
        kind="forward_log_return",
        horizon_rows=horizon_rows,
    )
    return FeatureSpec(features=FEATURES, labels=(label,))


DEMO_FEATURE_SPEC = demo_feature_spec()
"""The spec the demo uses: every feature, forward log return of mid over 10 rows."""


def _ts(table: pa.Table, what: str) -> npt.NDArray[np.int64]:
    ts = np.asarray(table.column("ts_event").cast(pa.int64()).to_numpy(), dtype=np.int64)
    if ts.size > 1 and (back := np.flatnonzero(ts[1:] < ts[:-1])).size:
        row = int(back[0]) + 1
        raise SchemaError(
            f"{what} row {row}: ts_event {ts[row]} is before row {row - 1}'s {ts[row - 1]} "
            f"(rule: sorted by ts_event)"
        )
    return ts


def _floats(table: pa.Table, name: str) -> Floats:
    return np.asarray(table.column(name).to_numpy(), dtype=np.float64)


def _feature_columns(quotes: pa.Table, trades: pa.Table | None) -> dict[str, Floats]:
    ts = _ts(quotes, "quotes")
    bid, ask = _floats(quotes, "bid_px"), _floats(quotes, "ask_px")
    bid_sz, ask_sz = _floats(quotes, "bid_sz"), _floats(quotes, "ask_sz")
    mid = (bid + ask) / 2
    depth = bid_sz + ask_sz
    with np.errstate(divide="ignore", invalid="ignore"):
        log_mid = np.log(mid)
        columns = {
            "mid": mid,
            "bid_px": bid,
            "ask_px": ask,
            "mid_log_return": np.diff(log_mid, prepend=log_mid[:1]),
            "spread_bps": (ask - bid) / mid * 1e4,
            "imbalance": np.where(depth == 0, 0.0, (bid_sz - ask_sz) / depth),
        }
    columns["log1p_bid_sz"] = np.log1p(bid_sz)
    columns["log1p_ask_sz"] = np.log1p(ask_sz)
    columns["time_of_day"] = (ts % _NS_PER_DAY) / _NS_PER_DAY
    if trades is None or trades.num_rows == 0:
        columns["last_trade_signed_size"] = np.zeros(ts.size)
        columns["trades_last_1s"] = np.zeros(ts.size)
        return columns
    trade_ts = _ts(trades, "trades")
    signed = _floats(trades, "side") * _floats(trades, "size")
    # side="right": a trade stamped exactly at the quote's time is already known to it.
    seen = np.searchsorted(trade_ts, ts, side="right")
    columns["last_trade_signed_size"] = np.where(seen > 0, signed[np.maximum(seen - 1, 0)], 0.0)
    before_window = np.searchsorted(trade_ts, ts - _NS_PER_SECOND, side="right")
    columns["trades_last_1s"] = (seen - before_window).astype(np.float64)
    return columns


def _label(label: LabelSpec, source: Floats, ts: npt.NDArray[np.int64]) -> Floats:
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
            return np.log(ahead / source)
        if label.kind == "forward_return":
            return ahead / source - 1.0
    return ahead


def build_features(
    quotes: pa.Table, trades: pa.Table | None = None, spec: FeatureSpec = DEMO_FEATURE_SPEC
) -> FeatureArrays:
    """Compute features and labels for one symbol's quotes (and trades), point in time.

    Parameters
    ----------
    quotes
        Quotes of one symbol (canonical quotes columns), sorted by ``ts_event``.
    trades
        Trades of the same symbol, sorted by ``ts_event``; None means no trades.
    spec
        Which of :data:`FEATURES` to emit, in which order, and the labels; label
        sources may be ``mid``, ``bid_px`` or ``ask_px``.

    Returns
    -------
    FeatureArrays
        ``(ts, values, labels, feature_names, label_names)``.

    Raises
    ------
    ConfigError
        If the spec names a feature or label source this builder does not know.
    SchemaError
        If a table is not sorted by ``ts_event``.

    Examples
    --------
    >>> from datetime import date
    >>> from ticktensor.ingest.synthetic import SyntheticMarket, generate_day
    >>> market = SyntheticMarket(symbols=("X",), quotes_per_day=500, trades_per_day=100)
    >>> day = generate_day(market, "X", market.days[0])
    >>> out = build_features(day["quotes"], day["trades"])
    >>> out.values.shape[1], out.labels.shape[1]
    (8, 1)
    """
    if unknown := [f for f in spec.features if f not in FEATURES]:
        raise ConfigError(f"unknown feature(s) {unknown}; this builder computes {list(FEATURES)}")
    if bad := [lb.source for lb in spec.labels if lb.source not in LABEL_SOURCES]:
        raise ConfigError(f"unknown label source(s) {bad}; expected one of {list(LABEL_SOURCES)}")
    columns = _feature_columns(quotes, trades)
    ts = _ts(quotes, "quotes")
    n = ts.size
    values = np.empty((n, len(spec.features)), dtype=np.float32)
    for j, name in enumerate(spec.features):
        values[:, j] = columns[name]
    labels = np.empty((n, len(spec.labels)), dtype=np.float32)
    for j, label in enumerate(spec.labels):
        labels[:, j] = _label(label, columns[label.source], ts) if n else []
    return FeatureArrays(ts, values, labels, spec.features, spec.label_names)
