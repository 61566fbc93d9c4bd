"""Normalization statistics of a session's feature rows: float64 sums that merge across sessions."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ticktensor.schemas import FeatureSpec

__all__ = ["STATS_GROUP_ROWS", "StatsPartial"]

STATS_GROUP_ROWS = 1 << 16
"""Rows a :class:`StatsPartial` sums at once (see there)."""


@dataclass
class StatsPartial:
    """Mergeable float64 sums for per-feature mean/std over the training period.

    Rows are summed in groups of :data:`STATS_GROUP_ROWS` in the order they are added,
    the group sums one after the other: a session's rows give the same sums whether
    they come at once or a block at a time (a rerun of a job stores the same stats).
    """

    count: int = 0
    total: npt.NDArray[np.float64] | None = None
    total_sq: npt.NDArray[np.float64] | None = None
    _waiting: list[npt.NDArray[np.float32]] = field(default_factory=list, repr=False)
    _waiting_rows: int = 0

    def add(self, values: npt.NDArray[np.float32]) -> None:
        self._waiting.append(values)
        self._waiting_rows += values.shape[0]
        self.count += values.shape[0]
        if self._waiting_rows >= STATS_GROUP_ROWS:
            rows = np.concatenate(self._waiting)
            whole = rows.shape[0] - rows.shape[0] % STATS_GROUP_ROWS
            for lo in range(0, whole, STATS_GROUP_ROWS):
                self._sum(rows[lo : lo + STATS_GROUP_ROWS])
            self._waiting = [rows[whole:]] if whole < rows.shape[0] else []
            self._waiting_rows = rows.shape[0] - whole

    def merge(self, other: StatsPartial) -> None:
        """Add ``other``'s sums (its rows after this one's)."""
        self._flush()
        other._flush()
        if other.total is not None and other.total_sq is not None:
            self.total = other.total if self.total is None else self.total + other.total
            self.total_sq = (
                other.total_sq if self.total_sq is None else self.total_sq + other.total_sq
            )
            self.count += other.count

    def mean_std(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        self._flush()
        if self.total is None or self.total_sq is None or self.count == 0:
            raise ValueError("no rows fell in the statistics period")
        mean = self.total / self.count
        var = np.maximum(self.total_sq / self.count - mean * mean, 0.0)
        return mean, np.sqrt(var)

    def _flush(self) -> None:
        """Sum the rows short of a group (no more rows come)."""
        if self._waiting_rows:
            self._sum(np.concatenate(self._waiting))
        self._waiting, self._waiting_rows = [], 0

    def _sum(self, values: npt.NDArray[np.float32]) -> None:
        v = values.astype(np.float64)
        v = np.where(np.isfinite(v), v, 0.0)
        s, sq = v.sum(axis=0), (v * v).sum(axis=0)
        self.total = s if self.total is None else self.total + s
        self.total_sq = sq if self.total_sq is None else self.total_sq + sq

    def add_period(
        self, spec: FeatureSpec, ts: npt.NDArray[np.int64], values: npt.NDArray[np.float32]
    ) -> None:
        """Add the rows of the spec's stats period (none without one)."""
        if spec.stats_period is not None:
            start, end = spec.stats_period
            inside = (ts >= start) & (ts < end)
            if inside.any():
                self.add(values[inside])
