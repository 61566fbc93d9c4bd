"""The engine's program: a feature spec's features as the native core's op codes."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError
from ticktensor.ingest.features import FIXED_ORDER_VERSION, check_spec, feature_parameter
from ticktensor.schemas import FeatureSpec

__all__ = ["CLOCKS", "Plan", "plan_of"]

CLOCKS: tuple[str, ...] = ("quotes", "trades", "ohlcv", "mbp10", "bars")
"""The clocks the live engine runs, by their native number."""

# The native core's Op enum (native/include/ticktensor/live_features.hpp), in its order.
_OPS: dict[str, int] = {
    name: code
    for code, name in enumerate(
        (
            "mid", "bid_px", "ask_px", "price", "spread", "spread_bps", "imbalance",
            "log1p_bid_sz", "log1p_ask_sz", "return", "log_return", "mid_log_return",
            "volatility", "volume", "dollar_volume", "trade_count", "signed_volume",
            "vwap_distance", "time_of_day", "last_trade_signed_size", "open", "high", "low",
            "close", "vwap", "range_bps", "depth_imbalance",
        )
    )
}  # fmt: skip
_DEFAULT_ROWS = {"return": 1, "log_return": 1, "volatility": 20, "depth_imbalance": 10}
_WINDOW = {"own": 0, "rows": 1, "ns": 2}


class Plan(NamedTuple):
    """Per feature: op code, window unit (own interval, rows, ns) and size; the clock's
    number and, for the bars clock, the bar length."""

    clock: int
    bar_ns: int
    bar_kind: int
    bar_threshold: float
    ops: npt.NDArray[np.uint8]
    windows: npt.NDArray[np.uint8]
    sizes: npt.NDArray[np.int64]


def plan_of(spec: FeatureSpec) -> Plan:
    """Compile ``spec``'s features for the native engine.

    Raises
    ------
    ConfigError
        The clock or a feature is not computed live yet, or ``volatility`` is asked of a
        spec before :data:`~ticktensor.ingest.features.FIXED_ORDER_VERSION`, whose batch
        side sums in an order no incremental engine repeats.
    """
    check_spec(spec)
    if spec.clock not in CLOCKS:
        raise ConfigError(f"clock {spec.clock!r} is not computed live yet; live clocks: {CLOCKS}")
    rule = spec.bar_rule
    ops, windows, sizes = [], [], []
    for name in spec.features:
        base, param = feature_parameter(name, spec.clock)
        if base == "trades_last_1s":
            base, param = "trade_count", ("ns", 1_000_000_000)
        if base not in _OPS:
            raise ConfigError(f"feature {name!r} is not computed live yet on clock {spec.clock!r}")
        if base == "volatility" and spec.version < FIXED_ORDER_VERSION:
            raise ConfigError(
                f"feature {name!r}: spec version {spec.version} sums volatility windows with "
                f"polars' rolling sum, which no tick-by-tick engine repeats bit for bit; use "
                f"version >= {FIXED_ORDER_VERSION} (its stores hold the live engine's values)"
            )
        unit, size = "own", 0
        if isinstance(param, tuple):
            unit, size = param
        elif base in _DEFAULT_ROWS:
            size = param if isinstance(param, int) else _DEFAULT_ROWS[base]
        ops.append(_OPS[base])
        windows.append(_WINDOW[unit])
        sizes.append(size)
    return Plan(
        CLOCKS.index(spec.clock),
        0 if rule is None or rule.kind != "time" else rule.interval_ns,
        0 if rule is None else ("time", "volume", "dollar").index(rule.kind),
        0.0 if rule is None or rule.kind == "time" else float(rule.size),
        np.asarray(ops, dtype=np.uint8),
        np.asarray(windows, dtype=np.uint8),
        np.asarray(sizes, dtype=np.int64),
    )
