"""WindowDataset against a slow per-sample reference: valid starts, windows, labels, chunks."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import ConfigError
from ticktensor.kernels import ThreadPool
from ticktensor.loaders import WindowDataset
from ticktensor.store import FeatureStats, Layout, SegmentData, Store, StoreVersion
from ticktensor.store.testing import write_segment

FEATURES = ("f0", "f1", "f2", "f3")
LABELS = ("y0", "y1")
SYMBOLS = ("AAA", "BBB", "C/C")
DAY_NS = 86_400 * 10**9
T0 = 1_704_186_000 * 10**9  # 2024-01-02 09:00 UTC
SEC = 10**9
HORIZON = 3  # the last HORIZON rows of a segment have no label


def segment_arrays(
    si: int, day: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Rows on a 1 s grid with gaps; values encode (segment, row, feature) exactly."""
    rng = np.random.default_rng([si, day])
    rows = 40 + 9 * si + 5 * day
    seconds = np.sort(rng.choice(2 * rows, rows, replace=False))
    ts = (T0 + day * DAY_NS + seconds * SEC).astype(np.int64)
    code = 100 * (si + 1) + day
    row = np.arange(rows, dtype=np.float32)[:, None]
    values = (code * 1000 + row + np.arange(len(FEATURES)) / 10).astype(np.float32)
    labels = np.stack([row[:, 0] + 0.5, -row[:, 0]], axis=1).astype(np.float32)
    labels[rows - HORIZON :, :] = np.nan
    labels[np.arange(rows) % 11 == 5, 1] = np.nan  # one label missing: no sample either
    return ts, values, labels


def build_store(
    path: Path | str, *, chunk_rows: int = 16, stats: bool = True, codec: str = "none"
) -> StoreVersion:
    """Three symbols (one with a slash) x two sessions, small and exact, stored as
    format-1 segments: the reference below reads them one by one."""
    store = Store.create(str(path), layout=Layout(codec=codec, chunk_rows=chunk_rows))
    records = []
    for si, symbol in enumerate(SYMBOLS):
        for day in range(2):
            ts, values, labels = segment_arrays(si, day)
            records.append(
                write_segment(
                    store,
                    symbol=symbol,
                    session=f"2024-01-{2 + day:02d}",
                    ts=ts,
                    values=values,
                    feature_names=FEATURES,
                    labels=labels,
                    label_names=LABELS,
                )
            )
    feature_stats = FeatureStats(
        names=FEATURES,
        mean=(1.0, 2.0, 3.0, 4.0),
        std=(2.0, 4.0, 0.0, 8.0),
        count=1,
        period=(T0, T0 + DAY_NS),
    )
    return store.commit(
        segments=records, stats=feature_stats if stats else None, message="loader test"
    )


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> StoreVersion:
    return build_store(tmp_path_factory.mktemp("loader") / "store")


_RAW: dict[int, dict[str, list[SegmentData]]] = {}


def raw_segments(version: StoreVersion) -> dict[str, list[SegmentData]]:
    """Each symbol's segments read in full, in session order (cached per version object)."""
    if id(version) not in _RAW:
        _RAW[id(version)] = {
            symbol: [version.read_segment(s) for s in version.segments if s.symbol == symbol]
            for symbol in version.symbols
        }
    return _RAW[id(version)]


def reference_index(
    version: StoreVersion,
    window: int,
    *,
    stride: int = 1,
    symbols: tuple[str, ...] | None = None,
    start: int | None = None,
    end: int | None = None,
    cross_gaps: bool = False,
) -> list[tuple[str, int, int]]:
    """(symbol, first ts, last ts) of every valid sample, one by one, in index order."""
    out = []
    for symbol in sorted(symbols or version.symbols):
        datas = raw_segments(version)[symbol]
        runs: list[list[SegmentData]] = [datas] if cross_gaps else [[d] for d in datas]
        for run in runs:
            ts = np.concatenate([d.ts for d in run])
            labels = np.concatenate([d.labels for d in run if d.labels is not None])
            for first in range(0, len(ts) - window + 1, stride):
                last = first + window - 1
                if np.isnan(labels[last]).any():
                    continue
                if (start is not None and ts[last] < start) or (
                    end is not None and ts[last] >= end
                ):
                    continue
                out.append((symbol, int(ts[first]), int(ts[last])))
    return out


def fast_index(ds: WindowDataset) -> list[tuple[str, int, int]]:
    """The same triples from the dataset's index arrays, read through its sources."""
    out = []
    for i in range(len(ds)):
        ts = ds.ts_sources[ds.sample_segment[i]]
        first = int(ds.sample_start[i])
        assert ts[first] == ds.sample_first_ts[i]
        assert ts[first + ds.window - 1] == ds.sample_ts[i]
        out.append(
            (ds.symbols[ds.sample_symbol[i]], int(ts[first]), int(ts[first + ds.window - 1]))
        )
    return out


@settings(max_examples=40, deadline=None)
@given(
    window=st.integers(1, 60),
    stride=st.integers(1, 7),
    symbols=st.none() | st.sets(st.sampled_from(SYMBOLS), min_size=1).map(tuple),
    start=st.none() | st.integers(-5, 120),
    end=st.none() | st.integers(0, 140),
    day=st.integers(0, 1),
    cross_gaps=st.booleans(),
)
def test_index_matches_reference(
    version: StoreVersion,
    window: int,
    stride: int,
    symbols: tuple[str, ...] | None,
    start: int | None,
    end: int | None,
    day: int,
    cross_gaps: bool,
) -> None:
    start_ns = None if start is None else T0 + day * DAY_NS + start * SEC
    end_ns = None if end is None else T0 + day * DAY_NS + end * SEC
    kwargs = {"stride": stride, "symbols": symbols, "start": start_ns, "end": end_ns}
    expected = reference_index(version, window, cross_gaps=cross_gaps, **kwargs)  # type: ignore[arg-type]
    if not expected:
        with pytest.raises(ConfigError, match="no samples left"):
            WindowDataset(version, window, cross_gaps=cross_gaps, pool=ThreadPool(1), **kwargs)  # type: ignore[arg-type]
        return
    ds = WindowDataset(version, window, cross_gaps=cross_gaps, pool=ThreadPool(1), **kwargs)  # type: ignore[arg-type]
    assert fast_index(ds) == expected


@pytest.mark.parametrize("cross_gaps", [False, True])
def test_windows_and_labels_match_raw_rows(version: StoreVersion, cross_gaps: bool) -> None:
    ds = WindowDataset(
        version, 12, features=["f2", "f0"], cross_gaps=cross_gaps, pool=ThreadPool(2)
    )
    assert ds.feature_names == ("f2", "f0")
    assert ds.n_features == 2
    assert ds.label_names == LABELS
    raw = raw_segments(version)
    indices = np.random.default_rng(1).permutation(len(ds))[:200]
    x, y = ds.get_batch(indices)
    assert x.shape == (200, 12, 2)
    assert x.dtype == np.float32
    assert x.flags.c_contiguous
    assert y.shape == (200, 2)
    assert y.dtype == np.float32
    for b, i in enumerate(indices):
        symbol = ds.symbols[ds.sample_symbol[i]]
        datas = raw[symbol]
        run = (
            datas
            if cross_gaps
            else [d for d in datas if d.ts[0] == ds.ts_sources[ds.sample_segment[i]][0]]
        )
        values = np.concatenate([d.values for d in run])
        labels = np.concatenate([d.labels for d in run if d.labels is not None])
        ts = np.concatenate([d.ts for d in run])
        s = int(ds.sample_start[i])
        np.testing.assert_array_equal(x[b], values[s : s + 12][:, [2, 0]])
        np.testing.assert_array_equal(y[b], labels[s + 11])
        # Point in time: the window ends exactly at the label's timestamp.
        assert ts[s + 11] == ds.sample_ts[i]
        assert ts[s] == ds.sample_first_ts[i]
        item_x, item_y = ds[int(i)]
        assert isinstance(item_x, torch.Tensor)
        assert item_x.dtype == torch.float32
        np.testing.assert_array_equal(item_x.numpy(), x[b])
        np.testing.assert_array_equal(item_y.numpy(), y[b])


def test_windows_never_cross_sessions_unless_asked(version: StoreVersion) -> None:
    apart = WindowDataset(version, 20, pool=ThreadPool(1))
    joined = WindowDataset(version, 20, cross_gaps=True, pool=ThreadPool(1))
    assert len(apart.sources) == len(version.segments)
    assert len(joined.sources) == len(SYMBOLS)
    day = ((apart.sample_first_ts - T0) // DAY_NS, (apart.sample_ts - T0) // DAY_NS)
    assert np.array_equal(day[0], day[1])
    crossing = (joined.sample_first_ts - T0) // DAY_NS != (joined.sample_ts - T0) // DAY_NS
    assert crossing.any()
    assert len(joined) > len(apart)


def test_sample_chunk_is_the_storage_chunk_of_the_first_row(version: StoreVersion) -> None:
    for cross_gaps in (False, True):
        ds = WindowDataset(version, 5, cross_gaps=cross_gaps, pool=ThreadPool(1))
        expected, base = [], 0
        for records in ds.records:
            offset = 0
            bounds = []
            for rec in records:
                chunk_rows = rec.record.layout["chunk_rows"]
                bounds.append((offset, rec.rows, base, chunk_rows))
                base += -(-rec.rows // chunk_rows)
                offset += rec.rows
            expected.append(bounds)
        for i in range(len(ds)):
            s = int(ds.sample_start[i])
            for offset, rows, chunk0, chunk_rows in expected[ds.sample_segment[i]]:
                if offset <= s < offset + rows:
                    assert ds.sample_chunk[i] == chunk0 + (s - offset) // chunk_rows
                    break
            else:
                pytest.fail(f"start {s} is in no segment")
        assert ds.sample_chunk.max() < base  # a segment's last chunk may start no window


def test_normalize_applies_store_stats(version: StoreVersion) -> None:
    plain = WindowDataset(version, 4, pool=ThreadPool(1))
    normed = WindowDataset(version, 4, normalize=True, features=["f3", "f2"], pool=ThreadPool(1))
    idx = np.arange(0, len(plain), 17)
    x, _ = plain.get_batch(idx)
    z, _ = normed.get_batch(idx)
    np.testing.assert_allclose(z[..., 0], (x[..., 3] - 4.0) / 8.0, rtol=1e-6)
    np.testing.assert_allclose(z[..., 1], x[..., 2] - 3.0, rtol=1e-6)  # std 0 divides by 1


def test_out_buffers_subset_and_pickle(version: StoreVersion) -> None:
    ds = WindowDataset(version, 8, stride=3, pool=ThreadPool(2))
    idx = np.array([5, 0, len(ds) - 1, 5])
    out = np.full((4, 8, 4), -1, np.float32)
    labels_out = np.full((4, 2), -1, np.float32)
    x, y = ds.get_batch(idx, out=out, labels_out=labels_out)
    assert x is out
    assert y is labels_out
    expected_x, expected_y = ds.get_batch(idx)
    np.testing.assert_array_equal(out, expected_x)
    np.testing.assert_array_equal(labels_out, expected_y)

    sub = ds.subset(idx[:3])
    assert len(sub) == 3
    assert sub.cache is ds.cache
    np.testing.assert_array_equal(sub.get_batch(np.arange(3))[0], expected_x[:3])
    np.testing.assert_array_equal(sub.sample_ts, ds.sample_ts[idx[:3]])
    assert len(ds) > 3  # the parent is unchanged

    back = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(back.get_batch(idx)[0], expected_x)
    assert back.pool.size == 2

    empty_x, empty_y = ds.get_batch(np.array([], dtype=np.int64))
    assert empty_x.shape == (0, 8, 4)
    assert empty_y.shape == (0, 2)


def test_torch_dataloader_accepts_it(version: StoreVersion) -> None:
    ds = WindowDataset(version, 6, pool=ThreadPool(1))
    x, y = next(iter(torch.utils.data.DataLoader(ds, batch_size=5)))
    assert x.shape == (5, 6, 4)
    assert y.shape == (5, 2)
    np.testing.assert_array_equal(x.numpy(), ds.get_batch(np.arange(5))[0])


def test_errors_say_what_was_wrong(version: StoreVersion, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="window"):
        WindowDataset(version, 0)
    with pytest.raises(ConfigError, match="stride"):
        WindowDataset(version, 4, stride=0)
    with pytest.raises(ConfigError, match=r"unknown feature\(s\) \['nope'\].*'f0'"):
        WindowDataset(version, 4, features=["f0", "nope"])
    with pytest.raises(ConfigError, match="distinct"):
        WindowDataset(version, 4, features=["f0", "f0"])
    with pytest.raises(ConfigError, match=r"unknown symbol\(s\) \['ZZZ'\]"):
        WindowDataset(version, 4, symbols=["ZZZ"])
    with pytest.raises(ConfigError, match="sequence of names"):
        WindowDataset(version, 4, symbols="AAA")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no samples left"):
        WindowDataset(version, 1000)
    with pytest.raises(ConfigError, match="no samples left"):
        WindowDataset(version, 4, start=T0 + 10 * DAY_NS)
    no_stats = build_store(tmp_path / "plain", stats=False)
    with pytest.raises(ConfigError, match="no feature statistics"):
        WindowDataset(no_stats, 4, normalize=True)
    ds = WindowDataset(version, 4, pool=ThreadPool(1))
    with pytest.raises(IndexError, match="out of range"):
        ds.get_batch(np.array([0, len(ds)]))
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]
    with pytest.raises(ConfigError, match="1-D integer"):
        ds.get_batch(np.array([0.5]))
    with pytest.raises(ConfigError, match="labels_out"):
        ds.get_batch(np.array([0]), labels_out=np.zeros((1, 3), np.float32))


def test_getitems_is_getitem_in_one_gather(version: StoreVersion) -> None:
    """torch's loader calls ``__getitems__`` for a whole batch when a dataset has it."""
    ds = WindowDataset(version, 5)
    picks = [7, 0, -1, 7, len(ds) - 2]
    pairs = ds.__getitems__(picks)
    assert len(pairs) == len(picks)
    for (x, y), i in zip(pairs, picks, strict=True):
        want_x, want_y = ds[i]
        assert torch.equal(x, want_x)
        assert torch.equal(y, want_y)
    assert ds.__getitems__([]) == []
    with pytest.raises(IndexError, match=f"sample {len(ds)} out of range"):
        ds.__getitems__([0, len(ds)])
    batches = list(torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=lambda s: s))
    assert sum(len(b) for b in batches) == len(ds)
