"""Time splits and walk-forward folds: no training window or label horizon touches validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import ConfigError
from ticktensor.kernels import ThreadPool
from ticktensor.loaders import TimeSplit, UniformOrder, WindowDataset, time_splits, walk_forward

from .test_dataset import DAY_NS, SEC, T0, build_store


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> WindowDataset:
    version = build_store(tmp_path_factory.mktemp("splits") / "store")
    return WindowDataset(version, 6, cross_gaps=True, pool=ThreadPool(1))


def spans(ds: WindowDataset, idx: np.ndarray, horizon_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """What a sample touches: its window's first timestamp to the end of its label horizon."""
    return ds.sample_first_ts[idx], ds.sample_ts[idx] + horizon_ns


def assert_apart(
    ds: WindowDataset, train: np.ndarray, valid: np.ndarray, horizon_ns: int, gap: int
) -> None:
    """Every training span is disjoint from every validation span, pair by pair."""
    t_lo, t_hi = spans(ds, train, horizon_ns)
    v_lo, v_hi = spans(ds, valid, horizon_ns)
    for lo, hi in zip(t_lo.tolist(), t_hi.tolist(), strict=True):
        overlaps = (v_lo <= hi + gap) & (lo <= v_hi + gap)
        assert not overlaps.any(), f"training span [{lo}, {hi}] overlaps validation"


def reference_splits(
    ds: WindowDataset, boundaries: list[int], horizon_ns: int, embargo_ns: int
) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(len(boundaries) + 1)]
    for i in range(len(ds)):
        last, first = int(ds.sample_ts[i]), int(ds.sample_first_ts[i])
        k = sum(last >= b for b in boundaries)
        if k < len(boundaries) and last + horizon_ns >= boundaries[k]:
            continue  # purged: the label looks into the next split
        if k > 0 and first < boundaries[k - 1] + embargo_ns:
            continue  # embargoed: the window starts too soon after the previous split
        out[k].append(i)
    return out


@settings(max_examples=40, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 2 * 86_400 + 200), min_size=0, max_size=4, unique=True),
    horizon=st.integers(0, 30),
    embargo=st.integers(0, 30),
)
def test_time_splits_match_reference_and_never_overlap(
    ds: WindowDataset, cuts: list[int], horizon: int, embargo: int
) -> None:
    # Cut points near the data: seconds after T0, most within a session.
    boundaries = sorted(T0 + (c % 200) * SEC + (c // 86_400) * DAY_NS for c in cuts)
    if len(set(boundaries)) != len(boundaries):
        return
    splits = time_splits(ds, boundaries, horizon_ns=horizon * SEC, embargo_ns=embargo * SEC)
    assert [s.tolist() for s in splits] == reference_splits(
        ds, boundaries, horizon * SEC, embargo * SEC
    )
    for a in range(len(splits)):
        for b in range(a + 1, len(splits)):
            assert_apart(ds, splits[a], splits[b], horizon * SEC, gap=0)


def test_purge_and_embargo_remove_what_would_leak(ds: WindowDataset) -> None:
    boundary = T0 + 60 * SEC
    horizon, embargo = 5 * SEC, 3 * SEC
    raw_train = np.flatnonzero(ds.sample_ts < boundary)
    raw_valid = np.flatnonzero(ds.sample_ts >= boundary)
    leaking = (ds.sample_ts[raw_train] + horizon >= boundary).sum()
    assert leaking > 0, "the fixture must have labels that reach past the boundary"
    train, valid = TimeSplit((boundary,), horizon, embargo).split(ds)
    assert train.size == raw_train.size - leaking
    assert (ds.sample_ts[train] + horizon < boundary).all()
    assert (ds.sample_first_ts[valid] >= boundary + embargo).all()
    assert valid.size < raw_valid.size
    assert_apart(ds, train, valid, horizon, gap=embargo - 1)


@pytest.mark.parametrize("expanding", [True, False])
def test_walk_forward_folds(ds: WindowDataset, expanding: bool) -> None:
    horizon, embargo = 4 * SEC, 2 * SEC
    folds = walk_forward(ds, 3, horizon_ns=horizon, embargo_ns=embargo, expanding=expanding)
    assert len(folds) == 3
    previous_valid_end = None
    for train, valid in folds:
        assert train.size > 0
        assert valid.size > 0
        assert ds.sample_ts[train].max() < ds.sample_ts[valid].min()  # validation after training
        assert_apart(ds, train, valid, horizon, gap=embargo - 1)
        if previous_valid_end is not None:
            assert ds.sample_ts[valid].min() >= previous_valid_end
        previous_valid_end = ds.sample_ts[valid].max()
    sizes = [train.size for train, _ in folds]
    assert sizes == sorted(sizes) if expanding else max(sizes) < 2 * min(sizes) + 10


def test_subsets_feed_orders(ds: WindowDataset) -> None:
    train_idx, valid_idx = time_splits(ds, [T0 + DAY_NS], horizon_ns=SEC)
    train = ds.subset(train_idx)
    order = UniformOrder(seed=1).order(train, epoch=0)
    np.testing.assert_array_equal(np.sort(order), np.arange(train_idx.size))
    x, _ = train.get_batch(order[:8])
    np.testing.assert_array_equal(x, ds.get_batch(train_idx[order[:8]])[0])
    assert (train.sample_ts < T0 + DAY_NS).all()
    assert valid_idx.size > 0


def test_bad_arguments(ds: WindowDataset) -> None:
    with pytest.raises(ConfigError, match="strictly increasing"):
        time_splits(ds, [T0 + 2, T0 + 1], horizon_ns=0)
    with pytest.raises(ConfigError, match=">= 0"):
        TimeSplit((T0,), horizon_ns=-1)
    with pytest.raises(ConfigError, match="n_folds"):
        walk_forward(ds, 0, horizon_ns=0)
    with pytest.raises(ConfigError, match="cannot cut"):
        walk_forward(ds.subset(np.arange(2)), 3, horizon_ns=0)
