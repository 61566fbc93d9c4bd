"""Normalization statistics: per-feature mean and std over the declared training period only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError
from ticktensor.schemas import FeatureSpec
from ticktensor.store import FeatureStats

from ._feature_engine import FeatureArrays

__all__ = ["FeatureStatsAccumulator"]

Floats = npt.NDArray[np.float64]


class FeatureStatsAccumulator:
    """Accumulate per-feature mean and std over rows with ``start <= ts < end``.

    Segments are added one at a time (:meth:`update`) or whole accumulators combined
    (:meth:`merge`, e.g. across worker processes); sums are float64 and combined with
    Chan et al.'s parallel update of (count, mean, M2), so the result does not depend
    on how the rows were split. Rows outside the period are never read. Non-finite
    values (NaN, inf) are skipped per feature; ``std`` is the population std.

    Examples
    --------
    >>> import numpy as np
    >>> acc = FeatureStatsAccumulator(("x",), period=(0, 10))
    >>> acc.update(np.array([5, 6, 20]), np.array([[1.0], [3.0], [100.0]]))
    2
    >>> acc.result().mean, acc.result().std
    ((2.0,), (1.0,))
    """

    def __init__(self, names: Sequence[str], period: tuple[int, int]) -> None:
        if len(period) != 2 or not period[0] < period[1]:
            raise ConfigError(
                f"stats period must be (start_ns, end_ns) with start < end, got {period!r}"
            )
        self.names = tuple(names)
        self.period = (int(period[0]), int(period[1]))
        self.rows = 0
        self._count: Floats = np.zeros(len(self.names))
        self._mean: Floats = np.zeros(len(self.names))
        self._m2: Floats = np.zeros(len(self.names))

    @classmethod
    def for_spec(cls, spec: FeatureSpec) -> FeatureStatsAccumulator:
        """An accumulator for the features of ``spec`` over its ``stats_period``."""
        if spec.stats_period is None:
            raise ConfigError("the feature spec declares no stats_period to compute stats over")
        return cls(spec.features, spec.stats_period)

    def _combine(self, count: Floats, mean: Floats, m2: Floats) -> None:
        total = self._count + count
        with np.errstate(invalid="ignore", divide="ignore"):
            delta = mean - self._mean
            share = np.where(total > 0, count / total, 0.0)
            self._mean = np.where(total > 0, self._mean + delta * share, 0.0)
            self._m2 = self._m2 + m2 + np.where(total > 0, delta**2 * self._count * share, 0.0)
        self._count = total

    def update(self, ts: npt.ArrayLike, values: npt.ArrayLike) -> int:
        """Add the rows of one segment that fall in the period; return how many did."""
        ts = np.asarray(ts, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64).reshape(ts.size, len(self.names))
        inside = values[(ts >= self.period[0]) & (ts < self.period[1])]
        finite = np.isfinite(inside)
        count = finite.sum(axis=0).astype(np.float64)
        kept = np.where(finite, inside, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, kept.sum(axis=0) / count, 0.0)
        m2 = (np.where(finite, inside - mean, 0.0) ** 2).sum(axis=0)
        self._combine(count, mean, m2)
        self.rows += inside.shape[0]
        return int(inside.shape[0])

    def add(self, arrays: FeatureArrays) -> int:
        """:meth:`update` with a segment's :class:`FeatureArrays`, checking feature names."""
        if tuple(arrays.feature_names) != self.names:
            raise ConfigError(f"features {arrays.feature_names} do not match {self.names}")
        return self.update(arrays.ts, arrays.values)

    def merge(self, other: FeatureStatsAccumulator) -> None:
        """Fold in another accumulator over the same features and period."""
        if (other.names, other.period) != (self.names, self.period):
            raise ConfigError("can only merge stats over the same features and period")
        self._combine(other._count, other._mean, other._m2)
        self.rows += other.rows

    def result(self) -> FeatureStats:
        """Mean and std per feature (NaN for a feature with no finite value in the period)."""
        if self.rows == 0:
            raise ConfigError(
                f"no rows fell in the stats period [{self.period[0]}, {self.period[1]})"
            )
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(self._count > 0, self._mean, np.nan)
            std = np.sqrt(np.where(self._count > 0, self._m2 / self._count, np.nan))
        return FeatureStats(
            names=self.names,
            mean=tuple(float(m) for m in mean),
            std=tuple(float(s) for s in std),
            count=self.rows,
            period=self.period,
        )
