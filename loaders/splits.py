"""Time splits with purge and embargo, and walk-forward folds, as sample-index arrays."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError

if TYPE_CHECKING:
    from .dataset import WindowDataset

__all__ = ["TimeSplit", "time_splits", "walk_forward"]

Int64s = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TimeSplit:
    """Cut a dataset at time boundaries into ``len(boundaries) + 1`` purged, embargoed splits.

    Split ``k`` holds the samples whose window's *last* timestamp ``t`` is in
    ``[b[k-1], b[k])`` (``b[-1] = -inf``, ``b[len] = +inf``). At each boundary ``b``:

    - **purge**: a sample of the split before ``b`` is dropped when its label horizon
      reaches ``b``: ``t + horizon_ns >= b``;
    - **embargo**: a sample of the split after ``b`` is dropped when its window starts
      before ``b + embargo_ns``: ``first_ts < b + embargo_ns``.

    So every kept sample's span ``[first_ts, t + horizon_ns]`` lies strictly inside its
    split's time range, and spans of different splits never overlap (with
    ``embargo_ns > 0`` they are also at least that far apart). Both rules apply on both
    sides of a split, so any split may serve for validation.

    Parameters
    ----------
    boundaries
        Strictly increasing cut times, ns UTC.
    horizon_ns
        How far past a window's last row its label looks (the label's forward horizon).
    embargo_ns
        Extra gap after each boundary, against serial correlation of features.
    """

    boundaries: tuple[int, ...]
    horizon_ns: int
    embargo_ns: int = 0

    def __post_init__(self) -> None:
        cuts = tuple(int(b) for b in self.boundaries)
        object.__setattr__(self, "boundaries", cuts)
        if any(b >= c for b, c in itertools.pairwise(cuts)):
            raise ConfigError(f"boundaries must be strictly increasing, got {list(cuts)}")
        if self.horizon_ns < 0 or self.embargo_ns < 0:
            raise ConfigError(
                f"horizon_ns and embargo_ns must be >= 0, got {self.horizon_ns}, {self.embargo_ns}"
            )

    def split(self, dataset: WindowDataset) -> list[Int64s]:
        """Sample indices of each split, ascending; use ``dataset.subset(idx)`` to train on one."""
        last = dataset.sample_ts
        first = dataset.sample_first_ts
        cuts = np.asarray(self.boundaries, dtype=np.int64)
        which = np.searchsorted(cuts, last, side="right")
        keep = np.ones(last.shape[0], dtype=bool)
        if cuts.size:
            # The boundary above each sample (purge) and the one below it (embargo).
            upper = np.append(cuts, np.iinfo(np.int64).max)[which]
            lower = np.insert(cuts, 0, np.iinfo(np.int64).min)[which]
            has_upper = which < cuts.size
            has_lower = which > 0
            keep &= ~has_upper | (last + self.horizon_ns < upper)
            keep &= ~has_lower | (first >= lower + self.embargo_ns)
        return [np.flatnonzero(keep & (which == k)).astype(np.int64) for k in range(cuts.size + 1)]


def time_splits(
    dataset: WindowDataset,
    boundaries: Sequence[int],
    *,
    horizon_ns: int,
    embargo_ns: int = 0,
) -> list[Int64s]:
    """Purged, embargoed splits of ``dataset`` at ``boundaries``; see :class:`TimeSplit`."""
    return TimeSplit(tuple(boundaries), horizon_ns, embargo_ns).split(dataset)


def walk_forward(
    dataset: WindowDataset,
    n_folds: int,
    *,
    horizon_ns: int,
    embargo_ns: int = 0,
    expanding: bool = True,
) -> list[tuple[Int64s, Int64s]]:
    """Walk-forward folds ``(train_idx, valid_idx)``, validation always after training.

    The samples' time range is cut at the quantiles of their last timestamps into
    ``n_folds + 1`` parts of about equal sample count. Fold ``i`` validates on part
    ``i + 1`` and trains on parts ``0..i`` (``expanding=True``) or on part ``i`` only.
    Training is purged at the cut (``t + horizon_ns < cut``) and validation embargoed
    (``first_ts >= cut + embargo_ns``), as in :class:`TimeSplit`, so no training window or
    label horizon overlaps validation data. ``horizon_ns`` must be >= 0.
    """
    if isinstance(n_folds, bool) or not isinstance(n_folds, int) or n_folds < 1:
        raise ConfigError(f"n_folds must be an integer >= 1, got {n_folds!r}")
    if horizon_ns < 0 or embargo_ns < 0:
        raise ConfigError(f"horizon_ns and embargo_ns must be >= 0, got {horizon_ns}, {embargo_ns}")
    ts = dataset.sample_ts
    qs = np.quantile(ts, np.linspace(0, 1, n_folds + 2)[1:-1], method="lower")
    cuts = np.unique(qs.astype(np.int64))
    if cuts.size < n_folds:
        raise ConfigError(
            f"cannot cut {len(dataset)} samples into {n_folds + 1} parts: only "
            f"{np.unique(ts).size} distinct timestamps"
        )
    first = dataset.sample_first_ts
    edges = np.concatenate([[np.iinfo(np.int64).min], cuts, [np.iinfo(np.int64).max]])
    folds = []
    for i in range(n_folds):
        cut = edges[i + 1]
        # Train ends at the cut: purge labels that reach it. Valid starts at the cut:
        # embargo windows that start before cut + embargo.
        train = (ts < cut) & (ts + horizon_ns < cut)
        if not expanding:
            train &= ts >= edges[i]
        valid = (ts >= cut) & (ts < edges[i + 2]) & (first >= cut + embargo_ns)
        folds.append(
            (np.flatnonzero(train).astype(np.int64), np.flatnonzero(valid).astype(np.int64))
        )
    return folds
