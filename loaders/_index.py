"""Which windows a dataset holds: segment runs, feature columns, normalization, valid starts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError
from ticktensor.store import SegmentRecord, StoreVersion

__all__ = ["feature_columns", "normalization", "select_runs", "valid_starts"]

Int64s = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]


def feature_columns(
    version: StoreVersion, features: Sequence[str] | None
) -> tuple[tuple[str, ...], Int64s | None]:
    known = tuple(version.feature_names)
    if features is None:
        return known, None
    if isinstance(features, str):
        raise ConfigError(f"features: expected a sequence of names, got the string {features!r}")
    wanted = tuple(features)
    unknown = [f for f in wanted if f not in known]
    if unknown:
        raise ConfigError(f"unknown feature(s) {unknown}; the store has {list(known)}")
    if len(set(wanted)) != len(wanted) or not wanted:
        raise ConfigError(f"features must be distinct and non-empty, got {list(wanted)}")
    return wanted, np.array([known.index(f) for f in wanted], dtype=np.int64)


def normalization(version: StoreVersion, names: tuple[str, ...]) -> tuple[Floats, Floats]:
    stats = version.stats
    if stats is None:
        raise ConfigError(
            f"normalize=True but store version {version.version} has no feature statistics: "
            "they are computed over a declared training period only (point-in-time); "
            "declare one with `ticktensor ingest --stats-period START:END`, a feature "
            "spec's stats_period, or Store.commit(stats=...)"
        )
    missing = [n for n in names if n not in stats.names]
    if missing:
        raise ConfigError(f"normalize=True but the store's statistics lack {missing}")
    pos = [stats.names.index(n) for n in names]
    mean = np.array([stats.mean[p] for p in pos], dtype=np.float32)
    std = np.array([stats.std[p] for p in pos], dtype=np.float32)
    std = np.where(np.isfinite(std) & (std > 0), std, np.float32(1)).astype(np.float32)
    return mean, std


def select_runs(
    version: StoreVersion,
    symbols: Sequence[str] | None,
    start: int | None,
    end: int | None,
    window: int,
    cross_gaps: bool,
) -> tuple[list[list[SegmentRecord]], list[int]]:
    """Group the segments to read into sources: one per segment, or per symbol when joined.

    Also returns each source's phase: the rows of the symbol's series before it that were
    left unread (joined series only), so the stride grid does not depend on the time filter.
    """
    if symbols is not None:
        unknown = sorted(set(symbols) - set(version.symbols))
        if unknown:
            raise ConfigError(f"unknown symbol(s) {unknown}; the store has {list(version.symbols)}")
    wanted = set(version.symbols if symbols is None else symbols)
    runs: list[list[SegmentRecord]] = []
    phases: list[int] = []
    for symbol in sorted(wanted):
        segs = sorted((s for s in version.segments if s.symbol == symbol), key=_time_key)
        hits = [
            i
            for i, s in enumerate(segs)
            if (start is None or s.ts_end >= start) and (end is None or s.ts_start < end)
        ]
        if not hits:
            continue
        if not cross_gaps:
            runs.extend([segs[i]] for i in hits)
            phases.extend(0 for _ in hits)
            continue
        lo, need = hits[0], window - 1
        while lo > 0 and need > 0:  # earlier segments only feed the first windows' rows
            lo -= 1
            need -= segs[lo].rows
        runs.append(segs[lo : hits[-1] + 1])
        phases.append(sum(s.rows for s in segs[:lo]))
    return runs, phases


def _time_key(record: SegmentRecord) -> tuple[int, str]:
    return (record.ts_start, record.session)


def valid_starts(
    ts: Int64s | None,
    labels: Floats,
    window: int,
    stride: int,
    phase: int,
    start: int | None,
    end: int | None,
) -> Int64s:
    """First rows of the valid windows of one source whose row 0 is row ``phase``.

    ``ts`` is only needed (and read) when a time range is given.
    """
    rows = labels.shape[0]
    first = np.arange(-phase % stride, max(rows - window + 1, 0), stride, dtype=np.int64)
    if first.size == 0:
        return first
    # The last rows form an arithmetic progression: strided views, no fancy-index copies.
    last = slice(int(first[0]) + window - 1, int(first[-1]) + window, stride)
    keep = np.ones(first.shape[0], dtype=bool)
    if labels.shape[1] == 1:
        keep &= ~np.isnan(labels[last, 0])
    elif labels.shape[1]:
        keep &= ~np.isnan(labels[last]).any(axis=1)
    if start is not None or end is not None:
        if ts is None:
            raise ValueError("valid_starts: a time range needs the timestamps")
        if start is not None:
            keep &= ts[last] >= start
        if end is not None:
            keep &= ts[last] < end
    if keep.all():
        return first
    kept: Int64s = first[keep]
    return kept
