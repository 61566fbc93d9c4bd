"""Feature specs: which columns form the feature matrix and how labels look ahead."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ticktensor.errors import ConfigError

__all__ = [
    "BarRule",
    "Clock",
    "FeatureSpec",
    "LabelKind",
    "LabelSpec",
    "parse_bar_rule",
    "parse_duration_ns",
]

Clock = Literal["quotes", "trades", "bars", "mbp10", "ohlcv"]
"""The event stream that gives one feature row per event (``bars``: per bar built from trades)."""

_CLOCKS: tuple[str, ...] = get_args(Clock)

LabelKind = Literal["forward_return", "forward_log_return", "forward_value"]
"""How a label looks ahead: ``x[t+h]/x[t] - 1``, ``log(x[t+h]/x[t])`` or ``x[t+h]``."""

_LABEL_KINDS: tuple[str, ...] = get_args(LabelKind)

_UNITS_NS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_UNITS_NS["d"] = 24 * _UNITS_NS["h"]
_DURATION = re.compile(r"(\d+)(ns|us|ms|s|m|h|d)")


def parse_duration_ns(text: str) -> int:
    """Parse a duration such as ``"500ms"``, ``"1s"``, ``"5m"`` (minutes) or ``"1h"`` to ns.

    Units: ``ns``, ``us``, ``ms``, ``s``, ``m`` (minute), ``h``, ``d``; the amount is a
    positive integer.

    Examples
    --------
    >>> parse_duration_ns("1m"), parse_duration_ns("250us")
    (60000000000, 250000)
    """
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or int(match.group(1)) == 0:
        raise ConfigError(
            f"duration {text!r} is not a positive integer followed by a unit "
            f"({', '.join(_UNITS_NS)}), e.g. '500ms', '1s', '5m'"
        )
    return int(match.group(1)) * _UNITS_NS[match.group(2)]


@dataclass(frozen=True)
class BarRule:
    """How trades are cut into bars: every ``interval_ns`` of time, or every ``size`` units.

    ``kind`` is ``"time"`` (``size`` is the interval in ns), ``"volume"`` (a bar closes
    once it holds ``size`` units traded) or ``"dollar"`` (``size`` of notional,
    ``price * size``). Parse the text form with :func:`parse_bar_rule`.
    """

    kind: Literal["time", "volume", "dollar"]
    size: float

    def __post_init__(self) -> None:
        if self.kind not in ("time", "volume", "dollar"):
            raise ConfigError(f"bar kind {self.kind!r} is not one of ['time', 'volume', 'dollar']")
        if not (isinstance(self.size, int | float) and math.isfinite(self.size) and self.size > 0):
            raise ConfigError(f"bar size must be a finite number > 0, got {self.size!r}")
        if self.kind == "time" and self.size != int(self.size):
            raise ConfigError(f"time bar interval must be whole ns, got {self.size!r}")

    @property
    def interval_ns(self) -> int:
        """The bar length of a time rule, in ns."""
        if self.kind != "time":
            raise ConfigError(f"a {self.kind} bar rule has no fixed interval")
        return int(self.size)


def parse_bar_rule(text: str) -> BarRule:
    """Parse ``"1s"``/``"time:1m"`` (time bars), ``"volume:1000"`` or ``"dollar:1e6"``.

    Examples
    --------
    >>> parse_bar_rule("1s"), parse_bar_rule("dollar:1e6")
    (BarRule(kind='time', size=1000000000), BarRule(kind='dollar', size=1000000.0))
    """
    if not isinstance(text, str):
        raise ConfigError(f"bar rule must be a string such as '1s' or 'volume:1000', got {text!r}")
    kind, sep, amount = text.strip().partition(":")
    if not sep:
        kind, amount = "time", kind
    if kind == "time":
        return BarRule("time", parse_duration_ns(amount))
    if kind in ("volume", "dollar"):
        try:
            size = float(amount)
        except ValueError:
            size = math.nan
        if not (math.isfinite(size) and size > 0):
            raise ConfigError(f"bar rule {text!r}: {kind} threshold must be a number > 0")
        return BarRule(kind, size)  # type: ignore[arg-type]  # narrowed by the check above
    raise ConfigError(
        f"bar rule {text!r}: expected a duration ('1s', 'time:1m'), 'volume:N' or 'dollar:N'"
    )


def _check_keys(what: str, data: Mapping[str, Any], allowed: set[str], required: set[str]) -> None:
    if unknown := sorted(set(data) - allowed):
        raise ConfigError(f"{what}: unknown key(s) {unknown}; allowed keys are {sorted(allowed)}")
    if missing := sorted(required - set(data)):
        raise ConfigError(f"{what}: missing required key(s) {missing}")


@dataclass(frozen=True)
class LabelSpec:
    """One training label: a column looked at a fixed horizon into the future.

    Exactly one of ``horizon_rows`` and ``horizon_ns`` is given, and it is > 0.

    Examples
    --------
    >>> LabelSpec("ret_10", source="mid", kind="forward_log_return", horizon_rows=10).horizon
    ('rows', 10)
    """

    name: str
    source: str
    kind: LabelKind = "forward_log_return"
    horizon_rows: int | None = None
    horizon_ns: int | None = None

    def __post_init__(self) -> None:
        where = f"label {self.name!r}"
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError(f"label name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.source, str) or not self.source.strip():
            raise ConfigError(
                f"{where}: source must be a non-empty column name, got {self.source!r}"
            )
        if self.kind not in _LABEL_KINDS:
            raise ConfigError(f"{where}: kind {self.kind!r} is not one of {list(_LABEL_KINDS)}")
        given = [h for h in (self.horizon_rows, self.horizon_ns) if h is not None]
        if len(given) != 1:
            raise ConfigError(
                f"{where}: give exactly one of horizon_rows and horizon_ns, "
                f"got horizon_rows={self.horizon_rows!r}, horizon_ns={self.horizon_ns!r}"
            )
        horizon = given[0]
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon <= 0:
            raise ConfigError(f"{where}: horizon must be an integer > 0, got {horizon!r}")

    @property
    def horizon(self) -> tuple[Literal["rows", "ns"], int]:
        """The horizon as ``("rows", n)`` or ``("ns", n)``."""
        if self.horizon_rows is not None:
            return ("rows", self.horizon_rows)
        assert self.horizon_ns is not None  # guaranteed by __post_init__
        return ("ns", self.horizon_ns)

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON-able dict; the unused horizon is left out."""
        out: dict[str, Any] = {"name": self.name, "source": self.source, "kind": self.kind}
        unit, value = self.horizon
        out[f"horizon_{unit}"] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LabelSpec:
        """Build from :meth:`to_dict` output, rejecting unknown keys by name."""
        allowed = {"name", "source", "kind", "horizon_rows", "horizon_ns"}
        _check_keys(f"label {data.get('name')!r}", data, allowed, {"name", "source"})
        return cls(**dict(data))


@dataclass(frozen=True)
class FeatureSpec:
    """Which columns become the float32 feature matrix, and which labels go with it.

    Parameters
    ----------
    features
        Column names, in the order of the matrix's columns.
    labels
        Label definitions; their names must not clash with feature names.
    stats_period
        ``(start, end)`` in ns since the epoch: normalization mean/std are computed
        over ``[start, end)`` only (the training period), never over test data.
    version
        Version of this spec, recorded in store metadata. From version 2 on, window
        sums over rows (``volatility_N``) add their terms oldest first, one by one, so
        that ``ticktensor.live`` computes them tick by tick bit for bit; version 1
        keeps polars' rolling sum (stores keep what they hold).
    clock
        The event stream giving one row per event: ``quotes`` (default), ``trades``,
        ``mbp10``, ``ohlcv`` (given bars) or ``bars`` (bars built from trades by ``bar``).
    bar
        The bar rule for ``clock="bars"`` (see :func:`parse_bar_rule`); None otherwise.

    Examples
    --------
    >>> spec = FeatureSpec(("spread_bps", "imbalance"),
    ...                    (LabelSpec("ret_10", "mid", horizon_rows=10),))
    >>> FeatureSpec.from_dict(spec.to_dict()) == spec
    True
    """

    features: tuple[str, ...]
    labels: tuple[LabelSpec, ...] = field(default_factory=tuple)
    stats_period: tuple[int, int] | None = None
    version: int = 1
    clock: Clock = "quotes"
    bar: str | None = None

    def __post_init__(self) -> None:
        # Accept lists from callers but store tuples, so the spec stays hashable.
        object.__setattr__(self, "features", tuple(self.features))
        object.__setattr__(self, "labels", tuple(self.labels))
        if not self.features:
            raise ConfigError("feature spec needs at least one feature, got none")
        for name in self.features:
            if not isinstance(name, str) or not name.strip():
                raise ConfigError(f"feature names must be non-empty strings, got {name!r}")
        for label in self.labels:
            if not isinstance(label, LabelSpec):
                raise ConfigError(f"labels must be LabelSpec, got {type(label).__name__}")
        names = [*self.features, *(label.name for label in self.labels)]
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ConfigError(
                f"feature spec names must be unique across features and labels; repeated: {dupes}"
            )
        if self.stats_period is not None:
            period = tuple(self.stats_period)
            if len(period) != 2 or not all(isinstance(t, int) for t in period):
                raise ConfigError(f"stats_period must be (start_ns, end_ns), got {period!r}")
            if period[0] >= period[1]:
                raise ConfigError(f"stats_period start {period[0]} must be before end {period[1]}")
            object.__setattr__(self, "stats_period", period)
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ConfigError(f"feature spec version must be an integer >= 1, got {self.version!r}")
        if self.clock not in _CLOCKS:
            raise ConfigError(f"clock {self.clock!r} is not one of {list(_CLOCKS)}")
        if self.clock == "bars" and self.bar is None:
            raise ConfigError("clock 'bars' needs a bar rule, e.g. bar='1s' or 'volume:1000'")
        if self.clock != "bars" and self.bar is not None:
            raise ConfigError(
                f"bar {self.bar!r} is only allowed with clock 'bars', not {self.clock!r}"
            )
        if self.bar is not None:
            parse_bar_rule(self.bar)

    @property
    def bar_rule(self) -> BarRule | None:
        """The parsed bar rule (None unless ``clock == "bars"``)."""
        return None if self.bar is None else parse_bar_rule(self.bar)

    @property
    def label_names(self) -> tuple[str, ...]:
        """Names of the labels, in order."""
        return tuple(label.name for label in self.labels)

    @property
    def max_horizon_rows(self) -> int:
        """Largest row horizon among the labels (0 if none is given in rows)."""
        return max((label.horizon_rows or 0 for label in self.labels), default=0)

    @property
    def max_horizon_ns(self) -> int:
        """Largest time horizon among the labels in ns (0 if none is given in ns)."""
        return max((label.horizon_ns or 0 for label in self.labels), default=0)

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON-able dict (lists, not tuples); ``clock``/``bar`` only when not default."""
        out: dict[str, Any] = {
            "features": list(self.features),
            "labels": [label.to_dict() for label in self.labels],
            "stats_period": None if self.stats_period is None else list(self.stats_period),
            "version": self.version,
        }
        # Left out at their defaults so specs written before clocks existed read back equal.
        if self.clock != "quotes":
            out["clock"] = self.clock
        if self.bar is not None:
            out["bar"] = self.bar
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureSpec:
        """Build from :meth:`to_dict` output, rejecting unknown keys by name."""
        allowed = {"features", "labels", "stats_period", "version", "clock", "bar"}
        _check_keys("feature spec", data, allowed, {"features"})
        period = data.get("stats_period")
        if period is not None and len(period) != 2:
            raise ConfigError(f"stats_period must be [start_ns, end_ns], got {period!r}")
        return cls(
            features=tuple(data["features"]),
            labels=tuple(LabelSpec.from_dict(label) for label in data.get("labels", ())),
            stats_period=None if period is None else (period[0], period[1]),
            version=data.get("version", 1),
            clock=data.get("clock", "quotes"),
            bar=data.get("bar"),
        )
