"""WindowIndex: a dataset's windows as data (pickles without a thread, cache or pool) and
WindowDataset as that index plus a reader runtime (subsets and concatenations agree)."""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np
import pytest

from ticktensor.kernels import ChunkGather, ThreadPool
from ticktensor.loaders import WindowDataset
from ticktensor.loaders._cache import ChunkCache
from ticktensor.loaders._chunks import ChunkLoader
from ticktensor.loaders._runtime import ReaderRuntime
from ticktensor.loaders._window_index import WindowIndex
from ticktensor.store import ChunkReader, Layout, Store, StoreVersion

SYMBOLS = ("AAA", "BBB", "CCC")
ROWS = (30, 21, 17)
WINDOW = 4
SEC = 10**9


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> StoreVersion:
    """Three symbols x two sessions, as packs of chunks of 8 rows."""
    store = Store.create(str(tmp_path_factory.mktemp("index")), layout=Layout(chunk_rows=8))
    packs = []
    for day in range(2):
        rows = [np.arange(n + day, dtype=np.float32) for n in ROWS]
        packs.append(
            store.write_pack(
                session=f"2024-01-0{2 + day}",
                symbols=SYMBOLS,
                offsets=np.cumsum([0, *(r.size for r in rows)]),
                ts=np.concatenate([(day * 86_400 + r.astype(np.int64)) * SEC for r in rows]),
                values=np.concatenate(
                    [np.stack([1000 * s + r, r / 3], axis=1) for s, r in enumerate(rows)]
                ).astype(np.float32),
                feature_names=("id", "third"),
                labels=np.concatenate([r[:, None] * 2 for r in rows]).astype(np.float32),
                label_names=("y",),
            )
        )
    return store.commit(packs=packs, message="window index tests")


def dataset(version: StoreVersion, **kwargs: Any) -> WindowDataset:
    return WindowDataset(version, WINDOW, pool=ThreadPool(1), threads=1, **kwargs)


_RUNTIME_TYPES = (ReaderRuntime, ChunkCache, ChunkGather, ThreadPool, ChunkLoader, ChunkReader)


def pickled(obj: object) -> tuple[bytes, set[type]]:
    """``obj`` pickled, and the types of the objects its pickle holds."""
    seen: set[type] = set()

    class Recording(pickle.Pickler):
        def reducer_override(self, o: Any) -> Any:
            seen.add(type(o))
            return NotImplemented

    buffer = io.BytesIO()
    Recording(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue(), seen


def assert_same_index(a: WindowIndex, b: WindowIndex) -> None:
    assert len(a) == len(b)
    for name in ("sample_segment", "sample_start", "labels_flat", "label_offset", "needed"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("sample_symbol", "sample_chunk", "sample_ts", "sample_first_ts"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.symbols == b.symbols
    assert (a.window, a.stride, a.feature_names, a.label_names, a.version.version) == (
        b.window,
        b.stride,
        b.feature_names,
        b.label_names,
        b.version.version,
    )
    assert len(a.chunks) == len(b.chunks)
    assert [f.rel for f in a.chunks.loads] == [f.rel for f in b.chunks.loads]


def test_the_index_pickles_without_what_reads_it(version: StoreVersion) -> None:
    ds = dataset(version)
    ds.get_batch(np.arange(len(ds)))  # the runtime has loaded chunks and started threads
    index = ds.index
    blob, types = pickled(index)
    assert not types & set(_RUNTIME_TYPES), types & set(_RUNTIME_TYPES)
    _, dataset_types = pickled(ds)
    assert ReaderRuntime in dataset_types  # the dataset is the index and its runtime
    # Its arrays and a little more: the store version, sources and chunk tables.
    arrays = sum(
        a.nbytes
        for a in (index.sample_segment, index.sample_start, index.labels_flat, index.needed)
    )
    assert len(blob) < arrays + 64 * 1024
    # Timestamps read on use are read again where unpickled, not carried along.
    assert len(index.ts_sources) == index.n_sources
    assert len(pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL)) == len(blob)
    back = pickle.loads(blob)
    assert isinstance(back, WindowIndex)
    assert "_ts_flat" not in back.__dict__
    assert_same_index(back, index)
    assert not back.sample_segment.flags.writeable


def test_per_sample_arrays_are_derived_on_first_use(version: StoreVersion) -> None:
    index = dataset(version).index
    derived = ("sample_ts", "sample_first_ts", "sample_symbol", "sample_chunk", "_ts_flat")
    assert not set(derived) & set(index.__dict__)
    per_day = [np.repeat(np.arange(3), [n + day - WINDOW + 1 for n in ROWS]) for day in range(2)]
    np.testing.assert_array_equal(index.sample_symbol, np.concatenate(per_day))
    sub = index.subset([3, 0, 5])
    assert "sample_symbol" in sub.__dict__  # sliced from the parent's
    assert "sample_ts" not in sub.__dict__
    np.testing.assert_array_equal(sub.sample_ts, index.sample_ts[[3, 0, 5]])
    assert sub.chunks is index.chunks
    assert sub.labels_flat is index.labels_flat


def test_subset_and_concat_are_the_index_s(version: StoreVersion) -> None:
    ds = dataset(version)
    rng = np.random.default_rng(0)
    picks = rng.permutation(len(ds))[:40]
    sub = ds.subset(picks)
    assert sub.runtime is ds.runtime
    assert sub.index.chunks is ds.index.chunks
    assert_same_index(sub.index, ds.index.subset(picks))
    joined = WindowDataset.concat([sub, ds])
    assert joined.runtime is ds.runtime
    assert_same_index(joined.index, WindowIndex.concat([sub.index, ds.index]))
    x, y = joined.get_batch(np.arange(len(joined)))
    want = [ds.get_batch(picks), ds.get_batch(np.arange(len(ds)))]
    np.testing.assert_array_equal(x, np.concatenate([w[0] for w in want]))
    np.testing.assert_array_equal(y, np.concatenate([w[1] for w in want]))


def test_a_concat_of_other_sources_joins_them(version: StoreVersion) -> None:
    a = dataset(version, symbols=["AAA", "CCC"], cross_gaps=True)
    b = dataset(version, symbols=["BBB", "CCC"], cross_gaps=True).subset([5, 1, 2])
    merged = WindowDataset.concat([a, b])
    assert merged.runtime is not a.runtime
    assert merged.runtime.chunks is merged.index.chunks
    index = WindowIndex.concat([a.index, b.index])
    assert_same_index(merged.index, index)
    assert merged.n_sources == 3  # CCC's joined sessions once
    assert merged.symbols == SYMBOLS
    x, y = merged.get_batch(np.arange(len(merged)))
    parts = [a.get_batch(np.arange(len(a))), b.get_batch(np.arange(len(b)))]
    np.testing.assert_array_equal(x, np.concatenate([p[0] for p in parts]))
    np.testing.assert_array_equal(y, np.concatenate([p[1] for p in parts]))


def test_a_runtime_reads_only_its_own_index(version: StoreVersion) -> None:
    ds, other = dataset(version), dataset(version, symbols=["BBB"])
    with pytest.raises(ValueError, match="other chunks"):
        ds.runtime.gather_batch(other.index, np.arange(2))
    x, y = ds.runtime.gather_batch(ds.index, np.arange(3))
    want_x, want_y = ds.get_batch(np.arange(3))
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(y, want_y)
