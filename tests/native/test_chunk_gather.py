"""The native chunk gather against a row-by-row reference; its errors, lifetimes and threads."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.kernels import ChunkGather, ThreadPool

Floats = npt.NDArray[np.float32]


def split(
    rng: np.random.Generator, sources: list[Floats], max_cuts: int
) -> tuple[list[list[int]], list[Floats]]:
    """Random chunk boundaries per source, and each chunk as its own (padded) array."""
    starts, chunks = [], []
    for values in sources:
        n = values.shape[0]
        cuts = sorted(set(rng.integers(1, n, size=min(max_cuts, n - 1)).tolist())) if n > 1 else []
        bounds = [0, *cuts]
        starts.append(bounds)
        for lo, hi in zip(bounds, [*cuts, n], strict=True):
            padding = int(rng.integers(0, 3))  # chunks may hold more rows than they own
            block = np.full((hi - lo + padding, values.shape[1]), np.nan, np.float32)
            block[: hi - lo] = values[lo:hi]
            chunks.append(block)
    return starts, chunks


def reference(sources: list[Floats], ids: list[int], starts: list[int], window: int) -> Floats:
    out = np.zeros((len(ids), window, sources[0].shape[1]), np.float32)
    for b, (i, s) in enumerate(zip(ids, starts, strict=True)):
        for r in range(window):
            out[b, r] = sources[i][s + r]
    return out


def loaded_gather(
    chunk_starts: list[list[int]], sources: list[Floats], chunks: list[Floats], threads: int
) -> ChunkGather:
    gather = ChunkGather(
        chunk_starts, [s.shape[0] for s in sources], sources[0].shape[1], ThreadPool(threads)
    )
    for c, block in enumerate(chunks):
        gather.set(c, block)
    return gather


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.lists(st.integers(1, 60), min_size=1, max_size=4),
    features=st.integers(1, 5),
    max_cuts=st.integers(0, 8),
    batch=st.integers(0, 40),
    threads=st.sampled_from([1, 2, 3]),
)
def test_matches_the_reference(
    seed: int, rows: list[int], features: int, max_cuts: int, batch: int, threads: int
) -> None:
    rng = np.random.default_rng(seed)
    sources = [rng.standard_normal((n, features)).astype(np.float32) for n in rows]
    chunk_starts, chunks = split(rng, sources, max_cuts)
    gather = loaded_gather(chunk_starts, sources, chunks, threads)
    window = int(rng.integers(1, max(rows) + 1))
    eligible = [i for i, n in enumerate(rows) if n >= window]
    ids = [int(rng.choice(eligible)) for _ in range(batch)]
    starts = [int(rng.integers(0, rows[i] - window + 1)) for i in ids]
    got = gather.gather(ids, starts, window)
    np.testing.assert_array_equal(got, reference(sources, ids, starts, window))
    assert gather.n_chunks == len(chunks) == gather.loaded_count


def test_large_batches_use_the_pool_and_cross_chunks() -> None:
    rng = np.random.default_rng(0)
    sources = [rng.standard_normal((5000, 32)).astype(np.float32) for _ in range(3)]
    chunk_starts = [list(range(0, 5000, 700)) for _ in sources]
    chunks = [s[lo : lo + 700].copy() for s in sources for lo in range(0, 5000, 700)]
    gather = loaded_gather(chunk_starts, sources, chunks, threads=3)
    ids = rng.integers(0, 3, 512).tolist()
    starts = rng.integers(0, 5000 - 128 + 1, 512).tolist()
    expected = np.stack([sources[i][s : s + 128] for i, s in zip(ids, starts, strict=True)])
    np.testing.assert_array_equal(gather.gather(ids, starts, 128), expected)


def test_errors_name_the_sample_and_the_chunk() -> None:
    values = np.arange(20, dtype=np.float32).reshape(10, 2)
    gather = ChunkGather([[0, 4, 8]], [10], 2, ThreadPool(1))
    gather.set(0, values[:4].copy())
    gather.set(2, values[8:].copy())
    with pytest.raises(RuntimeError, match=r"batch position 1: chunk 1 \(source 0, rows 4 to 8\)"):
        gather.gather([0, 0], [0, 2], window=3)
    with pytest.raises(RuntimeError, match="is not loaded") as missing:
        gather.gather([0], [3], window=2)
    assert missing.value.chunk == 1  # type: ignore[attr-defined]
    assert missing.value.batch_position == 0  # type: ignore[attr-defined]
    out = np.full((1, 3, 2), -1, np.float32)
    with pytest.raises(IndexError, match="does not fit in source 0 of 10 rows") as info:
        gather.gather([0], [8], window=3, out=out)
    assert info.value.batch_position == 0  # type: ignore[attr-defined]
    assert (out == -1).all()  # nothing written on error
    with pytest.raises(IndexError, match="source 1 out of range"):
        gather.gather([1], [0], window=1)
    with pytest.raises(ValueError, match="at least 4 rows and 2 columns"):
        gather.set(1, np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="float64"):
        gather.set(1, np.zeros((4, 2)))
    with pytest.raises(ValueError, match="C-contiguous"):
        gather.set(1, np.zeros((4, 4), np.float32)[:, ::2])
    with pytest.raises(IndexError, match="chunk 3 out of range"):
        gather.set(3, values[:4].copy())
    with pytest.raises(ValueError, match="starts must increase"):
        ChunkGather([[0, 5, 5]], [10], 2, ThreadPool(1))
    with pytest.raises(ValueError, match="start at row 0"):
        ChunkGather([[1]], [10], 2, ThreadPool(1))


def test_chunks_are_kept_alive_until_cleared() -> None:
    gather = ChunkGather([[0]], [4], 1, ThreadPool(1))
    block = np.arange(4, dtype=np.float32).reshape(4, 1)
    ref = weakref.ref(block)
    gather.set(0, block)
    del block
    gc.collect()
    assert ref() is not None
    assert gather.loaded(0)
    np.testing.assert_array_equal(gather.gather([0], [1], 2).ravel(), [1, 2])
    gather.clear(0)
    gc.collect()
    assert ref() is None
    assert not gather.loaded(0)
    assert gather.loaded_count == 0


def test_set_and_clear_while_other_threads_gather() -> None:
    """Gathers of loaded chunks stay exact while another thread swaps other chunks."""
    rng = np.random.default_rng(1)
    values = rng.standard_normal((4000, 8)).astype(np.float32)
    gather = ChunkGather([list(range(0, 4000, 500))], [4000], 8, ThreadPool(2))
    for c in range(8):
        gather.set(c, values[c * 500 : (c + 1) * 500].copy())
    stop = threading.Event()

    def churn() -> None:  # chunks 6 and 7 come and go; chunks 0-5 stay
        while not stop.is_set():
            for c in (6, 7):
                gather.clear(c)
                gather.set(c, values[c * 500 : (c + 1) * 500].copy())

    def read(seed: int) -> bool:
        r = np.random.default_rng(seed)
        for _ in range(200):
            starts = r.integers(0, 3000 - 64, 64)
            got = gather.gather(np.zeros(64, np.int64), starts, 64)
            if not all(np.array_equal(got[b], values[s : s + 64]) for b, s in enumerate(starts)):
                return False
        return True

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        with ThreadPoolExecutor(3) as pool:
            assert all(pool.map(read, range(3)))
    finally:
        stop.set()
        churner.join()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), batch=st.integers(0, 30), n_labels=st.integers(0, 3))
def test_gather_samples_equals_lookups_then_gather(seed: int, batch: int, n_labels: int) -> None:
    rng = np.random.default_rng(seed)
    rows = [int(n) for n in rng.integers(5, 50, size=3)]
    sources = [rng.standard_normal((n, 2)).astype(np.float32) for n in rows]
    chunk_starts, chunks = split(rng, sources, max_cuts=4)
    gather = loaded_gather(chunk_starts, sources, chunks, threads=2)
    window = int(rng.integers(1, min(rows) + 1))
    sample_source = np.repeat(np.arange(3, dtype=np.int32), [n - window + 1 for n in rows])
    sample_start = np.concatenate([np.arange(n - window + 1) for n in rows]).astype(np.int64)
    labels = rng.standard_normal((sum(rows), n_labels)).astype(np.float32)
    label_offset = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
    idx = rng.integers(0, sample_start.size, batch)
    x, y = gather.gather_samples(idx, sample_source, sample_start, window, labels, label_offset)
    ids, starts = sample_source[idx].tolist(), sample_start[idx].tolist()
    np.testing.assert_array_equal(x, reference(sources, ids, starts, window))
    rows_of = label_offset[sample_source[idx]] + sample_start[idx] + window - 1
    np.testing.assert_array_equal(y, labels[rows_of])
    with pytest.raises(IndexError, match=f"sample {sample_start.size} out of range"):
        gather.gather_samples(
            [sample_start.size], sample_source, sample_start, window, labels, label_offset
        )
