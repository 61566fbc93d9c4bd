"""The chunk cache's policy (farthest next use goes first), budget, threads, fork and fds."""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from ticktensor import DataLoader
from ticktensor.loaders import UniformOrder, WindowDataset
from ticktensor.loaders._cache import _CHUNK_THREAD, _shut_down
from ticktensor.store import Codec, StoreVersion

from .test_chunks import WINDOW, codec_store, zarr_windows


@pytest.fixture(scope="module")
def zstd_version(tmp_path_factory: pytest.TempPathFactory) -> StoreVersion:
    return codec_store(str(tmp_path_factory.mktemp("cache") / "store"), Codec.ZSTD, chunk_rows=8)


def chunks(*ids: int) -> np.ndarray:
    return np.asarray(ids, dtype=np.int64)


def test_threads_shut_down_from_a_chunk_thread_itself() -> None:
    # The collector may run a dropped cache's finalizer on one of its own chunk threads.
    executor = ThreadPoolExecutor(2, thread_name_prefix=_CHUNK_THREAD)
    executor.submit(_shut_down, executor).result(timeout=10)  # raised "cannot join" before
    assert executor._shutdown


def test_a_pass_end_does_not_wait_for_ever_on_another_holder(zstd_version: StoreVersion) -> None:
    # A dropped pass's finalizer may run on a chunk thread that a holder of the cache is
    # starting or joining: releasing the threads there must give up, not wait for it.
    ds = WindowDataset(zstd_version, WINDOW, threads=2)
    cache = ds.cache
    next(iter(DataLoader(ds, batch_size=4)))  # loads started: the cache has threads
    released = threading.Event()

    def pass_end() -> None:
        cache.release_threads()
        released.set()

    with cache.lock:  # as _start holds it while the thread below starts
        ender = threading.Thread(target=pass_end)
        ender.start()
        assert released.wait(timeout=10), "release_threads waited for the holder"
    ender.join()
    cache.release_threads()  # with the cache free it stops them
    assert cache._executor is None
    ds.close()


def test_eviction_drops_the_chunk_used_farthest_ahead(zstd_version: StoreVersion) -> None:
    chunk_bytes = 8 * 4 * 4
    ds = WindowDataset(zstd_version, WINDOW, cache_bytes=3 * chunk_bytes, threads=1)
    cache = ds.cache
    cache.require(chunks(0, 1, 2))
    assert cache.loaded_count == 3
    # Next batches read 3, then 1, then 0: chunk 2 is never read again, so it goes first.
    cache.require(chunks(3), upcoming=[chunks(1), chunks(0)])
    loaded = {c for c in range(len(ds.chunks)) if ds.runtime.gather.loaded(c)}
    assert loaded == {0, 1, 3}
    # Next come 3, then 1: 0 is never read again and goes.
    cache.require(chunks(5), upcoming=[chunks(3), chunks(1)])
    assert {c for c in range(len(ds.chunks)) if ds.runtime.gather.loaded(c)} == {1, 3, 5}
    # Two slots needed, all three are read later: the two read last (1, then 3) go.
    cache.require(chunks(6, 7), upcoming=[chunks(5), chunks(3), chunks(1)])
    assert {c for c in range(len(ds.chunks)) if ds.runtime.gather.loaded(c)} == {5, 6, 7}
    assert cache.stats.evictions == 4
    assert cache.used_bytes == 3 * chunk_bytes
    # A batch that needs more than the budget still gets its chunks, and says so.
    cache.require(chunks(8, 9, 10, 11))
    assert cache.stats.over_budget == 1
    assert cache.loaded_count >= 4


def test_plan_loads_ahead_within_the_budget(zstd_version: StoreVersion) -> None:
    chunk_bytes = 8 * 4 * 4
    ds = WindowDataset(zstd_version, WINDOW, cache_bytes=4 * chunk_bytes, threads=2)
    cache = ds.cache
    cache.plan([chunks(0, 1), chunks(2), chunks(3), chunks(4), chunks(5)])
    assert cache.used_bytes == 4 * chunk_bytes  # 0-3 started; 4 and 5 wait for room
    cache.require(chunks(0, 1))
    cache.require(chunks(2, 3))
    assert {c for c in range(len(ds.chunks)) if ds.runtime.gather.loaded(c)} == {0, 1, 2, 3}
    assert cache.stats.loads == 4
    assert cache.stats.evictions == 0
    cache.stop_threads()
    assert thread_names() == []


def thread_names() -> list[str]:
    """ticktensor threads other than those of datasets other tests left to the collector."""
    gc.collect()
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith("ticktensor-") and t not in _EARLIER
    ]


_EARLIER: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def _earlier_threads() -> None:
    gc.collect()
    _EARLIER.clear()
    _EARLIER.update(threading.enumerate())


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD])
def test_passes_leave_no_thread_and_no_fd(tmp_path: Path, codec: Codec) -> None:
    version = codec_store(str(tmp_path / "store"), codec, chunk_rows=8)
    ds = WindowDataset(version, WINDOW, cache_bytes=5 * 8 * 4 * 4, threads=2)
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    list(loader)  # warm imports and caches before counting
    before = open_fds()
    for _ in range(3):
        kept = list(loader)
    assert ds.cache.stats.evictions > 0
    assert thread_names() == []
    assert open_fds() == before
    x = np.concatenate([b[0].numpy() for b in kept])
    order = UniformOrder(0).order(ds, loader.epoch - 1)
    np.testing.assert_array_equal(x, zarr_windows(ds, order))  # kept batches stay exact


def _child(ds: WindowDataset, queue: multiprocessing.Queue[object]) -> None:
    try:
        queue.put(np.concatenate([x.numpy() for x, _ in DataLoader(ds, batch_size=16)]))
    except BaseException as exc:
        queue.put(repr(exc))


def test_a_dataset_in_use_before_fork_works_in_the_child(zstd_version: StoreVersion) -> None:
    ds = WindowDataset(zstd_version, WINDOW, threads=2)
    iterator = iter(DataLoader(ds, batch_size=16))
    next(iterator)  # threads and cache are busy in the parent at fork time
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[object] = context.Queue()
    child = context.Process(target=_child, args=(ds, queue))
    child.start()
    got = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0, got
    np.testing.assert_array_equal(got, zarr_windows(ds, np.arange(len(ds))))
    list(iterator)  # the parent goes on too
