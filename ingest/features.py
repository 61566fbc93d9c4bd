"""Point-in-time features and labels: declarative specs, TOML files, defaults and training stats.

A :class:`~ticktensor.schemas.FeatureSpec` names a row *clock* (which event stream
gives one row per event), the feature columns and the labels. :func:`compute_features`
evaluates it on one symbol's session: features at row ``i`` use only events stamped at
or before row ``i``'s time; labels look ahead only through their declared horizon.
:func:`compute_session_features` evaluates it on a session of every symbol at once,
each symbol's rows exactly as :func:`compute_features` gives them. The catalogue and
its formulas are in ``docs/features.md``; :func:`known_features` lists the names per
clock.

Examples
--------
>>> from ticktensor.ingest.synthetic import SyntheticMarket, generate_day
>>> market = SyntheticMarket(symbols=("X",), quotes_per_day=500, trades_per_day=100)
>>> day = generate_day(market, "X", market.days[0])
>>> spec = FeatureSpec(("log_return", "spread_bps", "signed_volume_1s", "volatility_20"))
>>> compute_features(day, spec).values.shape[1]
4
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from ticktensor.errors import ConfigError
from ticktensor.schemas import Clock, EventKind, FeatureSpec, LabelSpec, parse_duration_ns

from ._feature_engine import (
    FIXED_ORDER_VERSION,
    FeatureArrays,
    SymbolFeatures,
    check_spec,
    compute,
    compute_by_symbol,
    feature_parameter,
    known_features,
)
from ._feature_stats import FeatureStatsAccumulator

__all__ = [
    "DEMO_FEATURE_SPEC",
    "FEATURES",
    "FIXED_ORDER_VERSION",
    "FeatureArrays",
    "FeatureStatsAccumulator",
    "SymbolFeatures",
    "build_features",
    "check_spec",
    "compute_features",
    "compute_session_features",
    "default_spec",
    "demo_feature_spec",
    "dump_spec",
    "feature_parameter",
    "known_features",
    "load_spec",
]

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
"""The demo's features on the quotes clock, in its order."""


def compute_features(events: Mapping[EventKind, pa.Table], spec: FeatureSpec) -> FeatureArrays:
    """Compute the features and labels of ``spec`` for one symbol and one session.

    Parameters
    ----------
    events
        Canonical event tables by kind, each sorted by ``ts_event``. The clock's own
        kind is required (``bars`` needs trades); quotes are joined as of each row on
        the trades and bars clocks, trades onto the quotes and mbp10 clocks.
    spec
        Clock, features and labels.

    Returns
    -------
    FeatureArrays
        ``ts`` is the event time, or for bars the close time ``open + interval``, so a
        row never carries data from after its own time.

    Raises
    ------
    ConfigError
        Unknown feature or label source for the clock, or a needed input missing.
    SchemaError
        A table is not sorted by ``ts_event`` or lacks a needed column.
    """
    return compute(events, spec)


def compute_session_features(
    events: Mapping[EventKind, pa.Table], spec: FeatureSpec
) -> SymbolFeatures:
    """Compute ``spec`` for every symbol of one session at once.

    Each symbol's rows equal what :func:`compute_features` gives for that symbol's
    events alone: joins match the symbol and every shift, cumulative or rolling sum
    and label horizon stays within it, so no symbol's features see another's events.
    Vectorized over the symbols (one polars plan for the session), which pays from a
    few symbols on.

    Parameters
    ----------
    events
        Canonical event tables by kind, each with its ``symbol`` column, sorted by
        (``symbol``, ``ts_event``).
    spec
        Clock, features and labels.

    Returns
    -------
    SymbolFeatures
        The sorted symbols, the offsets of each one's rows and the rows of all.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from ticktensor.schemas import conform
    >>> trades = conform(pa.table({"ts_event": [0, 10**9, 0, 2 * 10**9],
    ...                            "symbol": ["A", "A", "B", "B"], "price": [1.0, 2.0, 5.0, 4.0],
    ...                            "size": [1.0, 1.0, 2.0, 2.0], "side": [1, -1, 1, 1]}), "trades")
    >>> out = compute_session_features({EventKind.TRADES: trades},
    ...                                FeatureSpec(("close", "return"), clock="bars", bar="1s"))
    >>> out.symbols, out.offsets.tolist()
    (('A', 'B'), [0, 2, 4])
    >>> out.features.values[:, 1].tolist()  # B's first return does not look at A's rows
    [0.0, 1.0, 0.0, -0.20000000298023224]
    """
    return compute_by_symbol(events, spec)


def build_features(
    quotes: pa.Table, trades: pa.Table | None = None, spec: FeatureSpec | None = None
) -> FeatureArrays:
    """Quotes (and trades) on the quotes clock; the demo's entry point.

    Examples
    --------
    >>> from ticktensor.ingest.synthetic import SyntheticMarket, generate_day
    >>> market = SyntheticMarket(symbols=("X",), quotes_per_day=500, trades_per_day=100)
    >>> day = generate_day(market, "X", market.days[0])
    >>> out = build_features(day["quotes"], day["trades"])
    >>> out.values.shape[1], out.labels.shape[1]
    (8, 1)
    """
    events = {EventKind.QUOTES: quotes}
    if trades is not None:
        events[EventKind.TRADES] = trades
    return compute(events, spec or DEMO_FEATURE_SPEC)


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

_DEFAULTS: dict[str, tuple[str, ...]] = {
    "mbp10": ("log_return", "spread_bps", "imbalance", "depth_imbalance", "log1p_bid_sz",
              "log1p_ask_sz", "volatility_20", "signed_volume_1s", "trade_count_1s", "time_of_day"),
    "quotes": ("log_return", "spread_bps", "imbalance", "log1p_bid_sz", "log1p_ask_sz",
               "volatility_20", "signed_volume_1s", "trade_count_1s", "time_of_day"),
    "bars": ("log_return", "volatility_20", "range_bps", "volume", "signed_volume",
             "trade_count", "vwap_distance", "time_of_day"),
    "ohlcv": ("log_return", "volatility_20", "range_bps", "volume", "trade_count",
              "vwap_distance", "time_of_day"),
}  # fmt: skip


def default_spec(kinds: set[EventKind] | set[str], horizon_rows: int = 10) -> FeatureSpec:
    """A sensible clock, features and label for the event kinds at hand.

    mbp10 gives the mbp10 clock; else quotes the quotes clock (trades joined as of);
    else trades 1 s bars; else ohlcv the ohlcv clock. The label is the forward log
    return of the clock's price (mid or close) over ``horizon_rows`` rows.

    Examples
    --------
    >>> spec = default_spec({EventKind.TRADES})
    >>> spec.clock, spec.bar, spec.labels[0].source
    ('bars', '1s', 'close')
    """
    have = {EventKind(k) for k in kinds}
    order: tuple[tuple[EventKind, Clock], ...] = (
        (EventKind.MBP10, "mbp10"),
        (EventKind.QUOTES, "quotes"),
        (EventKind.TRADES, "bars"),
        (EventKind.OHLCV, "ohlcv"),
    )
    clock = next((c for kind, c in order if kind in have), None)
    if clock is None:
        raise ConfigError(
            f"no feature clock for event kinds {sorted(map(str, have))}; "
            "need one of mbp10, quotes, trades, ohlcv"
        )
    source = "mid" if clock in ("mbp10", "quotes") else "close"
    label = LabelSpec(f"{source}_fwd_log_return_{horizon_rows}", source, horizon_rows=horizon_rows)
    features = _DEFAULTS[clock]
    if clock in ("mbp10", "quotes") and EventKind.TRADES not in have:
        features = tuple(f for f in features if not f.endswith("_1s"))
    return FeatureSpec(
        features,
        (label,),
        clock=clock,
        bar="1s" if clock == "bars" else None,
    )


def _ns(value: Any, what: str) -> int:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigError(
                f"{what}: datetime {value} needs a UTC offset, e.g. 2024-01-02T00:00Z"
            )
        return int(value.timestamp()) * 10**9 + value.microsecond * 1000
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(f"{what}: expected ns since the epoch or an offset datetime, got {value!r}")


def spec_from_toml(data: Mapping[str, Any]) -> FeatureSpec:
    """Build a spec from parsed TOML (see :func:`load_spec` for the format)."""
    data = dict(data)
    period = data.get("stats_period")
    if period is not None:
        if not isinstance(period, list) or len(period) != 2:
            raise ConfigError(f"stats_period must be [start, end], got {period!r}")
        data["stats_period"] = [_ns(t, "stats_period") for t in period]
    labels = []
    for raw in data.get("labels", []):
        label = dict(raw)
        if "horizon" in label:  # "30s" (a duration) or 10 (rows)
            horizon = label.pop("horizon")
            key = "horizon_rows" if isinstance(horizon, int) else "horizon_ns"
            label[key] = horizon if isinstance(horizon, int) else parse_duration_ns(horizon)
        labels.append(label)
    data["labels"] = labels
    spec = FeatureSpec.from_dict(data)
    check_spec(spec)
    return spec


def load_spec(path: str | Path) -> FeatureSpec:
    """Read a feature spec from a TOML file and check it against the catalogue.

    Top-level keys: ``version``, ``clock``, ``bar``, ``features`` (list of names),
    ``stats_period`` (two ns integers or offset datetimes) and ``[[labels]]`` tables
    with ``name``, ``source``, ``kind`` and one of ``horizon_rows``, ``horizon_ns`` or
    ``horizon`` (an integer row count or a duration such as ``"30s"``). See
    ``examples/features.toml``.
    """
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return spec_from_toml(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"cannot write {value!r} to TOML")
    return str(value)


def dump_spec(spec: FeatureSpec) -> str:
    """The spec as TOML text that :func:`load_spec` reads back equal."""
    data = spec.to_dict()
    lines = [f"{k} = {_toml(v)}" for k, v in data.items() if k != "labels" and v is not None]
    for label in data["labels"]:
        lines += ["", "[[labels]]", *(f"{k} = {_toml(v)}" for k, v in label.items())]
    return "\n".join(lines) + "\n"
