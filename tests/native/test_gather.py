"""The native window gather against a slow numpy reference, its errors, lifetimes and threads."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.kernels import ThreadPool, WindowGather, gather_windows

Sources = list[npt.NDArray[np.float32]]


def reference_gather(
    sources: Sources, array_ids: list[int], starts: list[int], window: int
) -> npt.NDArray[np.float32]:
    """Row by row, the obviously correct way."""
    n_features = sources[0].shape[1]
    out = np.zeros((len(array_ids), window, n_features), dtype=np.float32)
    for b, (array_id, start) in enumerate(zip(array_ids, starts, strict=True)):
        for r in range(window):
            out[b, r, :] = sources[array_id][start + r, :]
    return out


def make_sources(rng: np.random.Generator, rows: list[int], n_features: int) -> Sources:
    return [rng.standard_normal((n, n_features), dtype=np.float32) for n in rows]


def random_samples(
    rng: np.random.Generator, rows: list[int], window: int, batch: int
) -> tuple[list[int], list[int]]:
    eligible = [i for i, n in enumerate(rows) if n >= window]
    ids = [int(rng.choice(eligible)) for _ in range(batch)]
    starts = [int(rng.integers(0, rows[i] - window + 1)) for i in ids]
    return ids, starts


@st.composite
def gather_cases(draw: st.DrawFn, max_rows: int, max_features: int, max_batch: int) -> dict:
    n_sources = draw(st.integers(1, 6))
    rows = draw(st.lists(st.integers(1, max_rows), min_size=n_sources, max_size=n_sources))
    window = draw(st.integers(1, max(rows)))
    eligible = [i for i, n in enumerate(rows) if n >= window]
    batch = draw(st.integers(0, max_batch))
    ids = draw(st.lists(st.sampled_from(eligible), min_size=batch, max_size=batch))
    starts = [draw(st.integers(0, rows[i] - window)) for i in ids]
    return {
        "rows": rows,
        "n_features": draw(st.integers(1, max_features)),
        "window": window,
        "ids": ids,
        "starts": starts,
        "threads": draw(st.integers(1, 4)),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def check_case(case: dict) -> None:
    sources = make_sources(np.random.default_rng(case["seed"]), case["rows"], case["n_features"])
    gather = WindowGather(sources, ThreadPool(case["threads"]))
    got = gather.gather(case["ids"], case["starts"], case["window"])
    expected = reference_gather(sources, case["ids"], case["starts"], case["window"])
    assert got.shape == expected.shape
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=150, deadline=None)
@given(gather_cases(max_rows=60, max_features=6, max_batch=20))
def test_small_batches_match_reference(case: dict) -> None:
    check_case(case)


@settings(max_examples=25, deadline=None)
@given(gather_cases(max_rows=3000, max_features=48, max_batch=200))
def test_large_batches_on_the_pool_match_reference(case: dict) -> None:
    # Batches here often pass the 256 KiB inline limit, so the pool splits them.
    check_case(case)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_threaded_batch_matches_reference(threads: int) -> None:
    rng = np.random.default_rng(7)
    rows = [5000, 4000, 300]
    sources = make_sources(rng, rows, 32)
    ids, starts = random_samples(rng, rows, 128, 256)  # 4 MiB: always split across the pool
    got = WindowGather(sources, ThreadPool(threads)).gather(ids, starts, 128)
    np.testing.assert_array_equal(got, reference_gather(sources, ids, starts, 128))


@pytest.fixture
def sources() -> Sources:
    return make_sources(np.random.default_rng(0), [10, 16, 5], 3)


@pytest.fixture
def gather(sources: Sources) -> WindowGather:
    return WindowGather(sources, ThreadPool(2))


@pytest.mark.parametrize(
    ("ids", "starts", "window"),
    [
        pytest.param([0, 1, 2], [3, 0, 4], 1, id="window-1"),
        pytest.param([0, 1, 2], [10 - 4, 16 - 4, 5 - 4], 4, id="last-valid-start"),
        pytest.param([1, 1], [0, 0], 16, id="window-equals-rows"),
        pytest.param([2, 2, 2], [0, 0, 0], 5, id="repeated-sample"),
    ],
)
def test_edge_cases(
    gather: WindowGather, sources: Sources, ids: list[int], starts: list[int], window: int
) -> None:
    got = gather.gather(ids, starts, window)
    np.testing.assert_array_equal(got, reference_gather(sources, ids, starts, window))


def test_empty_batch(gather: WindowGather) -> None:
    got = gather.gather([], [], 4)
    assert got.shape == (0, 4, 3)
    assert got.dtype == np.float32


def test_empty_batch_still_checks_window(gather: WindowGather) -> None:
    with pytest.raises(ValueError, match="window: expected >= 1, got 0"):
        gather.gather([], [], 0)


def test_writes_into_given_out(gather: WindowGather, sources: Sources) -> None:
    out = np.full((2, 3, 3), np.nan, dtype=np.float32)
    result = gather.gather(np.array([1, 0], dtype=np.int32), (2, 7), 3, out=out)
    assert result is out
    np.testing.assert_array_equal(out, reference_gather(sources, [1, 0], [2, 7], 3))


def test_accepts_strided_and_narrow_index_arrays(gather: WindowGather, sources: Sources) -> None:
    ids = np.array([1, 9, 0, 9, 2, 9], dtype=np.int64)[::2]  # not contiguous
    starts = np.array([4, 2, 0], dtype=np.uint8)
    got = gather.gather(ids, starts, 1)
    np.testing.assert_array_equal(got, reference_gather(sources, [1, 0, 2], [4, 2, 0], 1))


def test_properties(gather: WindowGather) -> None:
    assert gather.n_sources == 3
    assert gather.n_features == 3
    assert [gather.rows(i) for i in range(3)] == [10, 16, 5]
    assert gather.pool.size == 2
    with pytest.raises(IndexError, match="array index 3 out of range for 3 source arrays"):
        gather.rows(3)


def test_gather_windows_convenience(sources: Sources) -> None:
    got = gather_windows(sources, [2], [1], 4, pool=ThreadPool(1))
    np.testing.assert_array_equal(got, reference_gather(sources, [2], [1], 4))


@pytest.mark.parametrize(
    ("ids", "starts", "message", "position"),
    [
        ([0, 1, 0, 17], [0, 0, 0, 0], "batch position 3: array index 17 out of range for 3", 3),
        ([0, -1], [0, 0], "batch position 1: array index -1 out of range for 3 source arrays", 1),
        ([0, 1, 2], [0, 0, -2], r"batch position 2: window \[-2, 2\) starts before row 0", 2),
        (
            [0, 0, 0, 0, 0, 1],
            [0, 0, 0, 0, 0, 13],
            r"batch position 5: window \[13, 17\) exceeds array 1 of 16 rows",
            5,
        ),
        ([0, 2], [6, 2], r"batch position 1: window \[2, 6\) exceeds array 2 of 5 rows", 1),
        (
            [0],
            [2**63 - 2],
            r"batch position 0: window \[9223372036854775806, 9223372036854775810\) exceeds",
            0,
        ),
    ],
)
def test_bad_sample_raises_index_error_and_writes_nothing(
    gather: WindowGather, ids: list[int], starts: list[int], message: str, position: int
) -> None:
    out = np.full((len(ids), 4, 3), -7.0, dtype=np.float32)
    with pytest.raises(IndexError, match=message) as caught:
        gather.gather(ids, starts, 4, out=out)
    assert caught.value.batch_position == position  # type: ignore[attr-defined]
    assert caught.value.array_id == ids[position]  # type: ignore[attr-defined]
    assert caught.value.start == starts[position]  # type: ignore[attr-defined]
    assert (out == -7.0).all(), "a failed gather must leave out untouched"


def test_bad_sample_in_large_batch_writes_nothing() -> None:
    rng = np.random.default_rng(3)
    sources = make_sources(rng, [1000, 1000], 32)
    ids, starts = random_samples(rng, [1000, 1000], 64, 512)
    starts[-1] = 1000 - 63
    out = np.zeros((512, 64, 32), dtype=np.float32)
    with pytest.raises(IndexError, match="batch position 511: window"):
        WindowGather(sources, ThreadPool(3)).gather(ids, starts, 64, out=out)
    assert not out.any()


@pytest.mark.parametrize(
    ("out", "message"),
    [
        (np.zeros((2, 4, 2), np.float32), r"out: expected shape \(2, 4, 3\), got \(2, 4, 2\)"),
        (np.zeros((2, 4), np.float32), r"out: expected shape \(2, 4, 3\), got \(2, 4\)"),
        (np.zeros((3, 4, 3), np.float32), r"out: expected shape \(2, 4, 3\), got \(3, 4, 3\)"),
        (np.zeros((2, 4, 3), np.float64), "out: expected dtype float32, got float64"),
        (np.zeros((2, 3, 4), np.float32).transpose(0, 2, 1), "out: expected a C-contiguous"),
        (np.zeros((2, 4, 3), np.float32).tolist(), "out: expected a writable float32 numpy"),
    ],
)
def test_bad_out_raises_value_error(gather: WindowGather, out: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gather.gather([0, 1], [0, 0], 4, out=out)  # type: ignore[arg-type]


def test_read_only_out_raises_value_error(gather: WindowGather) -> None:
    out = np.zeros((1, 4, 3), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out: expected a writable array, got a read-only one"):
        gather.gather([0], [0], 4, out=out)


def test_out_aliasing_a_source_is_rejected() -> None:
    buffer = np.arange(64 * 4, dtype=np.float32).reshape(64, 4)
    gather = WindowGather([buffer], ThreadPool(1))
    with pytest.raises(ValueError, match="out must not overlap the sources"):
        gather.gather([0], [8], 8, out=buffer[:8].reshape(1, 8, 4))


@pytest.mark.parametrize(
    ("ids", "starts", "error", "message"),
    [
        ([0, 1], [0], ValueError, "expected the same length, got 2 and 1"),
        ([[0, 1]], [[0, 0]], ValueError, r"array_ids: expected a 1-D array, got shape \(1, 2\)"),
        ([0.0, 1.0], [0, 0], TypeError, "array_ids: expected integers, got dtype float64"),
        ([0, 1], [True, False], TypeError, "starts: expected integers, got dtype bool"),
        ([0, 1], np.array([0, 2**64 - 1], np.uint64), IndexError, "batch position 1: starts"),
    ],
)
def test_bad_index_arrays(
    gather: WindowGather, ids: object, starts: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        gather.gather(ids, starts, 2)  # type: ignore[arg-type]


@pytest.mark.parametrize("window", [0, -3])
def test_window_below_one_raises_value_error(gather: WindowGather, window: int) -> None:
    with pytest.raises(ValueError, match=f"window: expected >= 1, got {window}"):
        gather.gather([0], [0], window)


def test_non_contiguous_source_is_rejected_not_copied() -> None:
    wide = np.zeros((10, 6), np.float32)
    with pytest.raises(ValueError, match=r"source 1: expected a C-contiguous array.*ascontiguous"):
        WindowGather([np.zeros((4, 3), np.float32), wide[:, ::2]], ThreadPool(1))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.zeros((4, 2), np.float32), "source 1: expected 3 features like source 0, got 2"),
        (np.zeros((4, 3), np.float64), "source 1: expected a 2-D float32 array.*float64"),
        (np.zeros(12, np.float32), "source 1: expected a 2-D float32 array.*1-D"),
        ([[0.0, 0.0, 0.0]], "source 1: expected a numpy array, got list"),
    ],
)
def test_bad_source_raises_value_error(bad: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WindowGather([np.zeros((4, 3), np.float32), bad], ThreadPool(1))  # type: ignore[list-item]


def test_pool_checks_its_arguments() -> None:
    assert ThreadPool(3).size == 3
    with pytest.raises(ValueError, match="n_threads: expected >= 1, got 0"):
        ThreadPool(0)
    with pytest.raises(TypeError, match="pool: expected a ThreadPool"):
        WindowGather([np.zeros((4, 3), np.float32)], 2)  # type: ignore[arg-type]


def test_sources_stay_alive_while_the_gather_lives() -> None:
    def build() -> tuple[WindowGather, weakref.ref[np.ndarray]]:
        source = np.arange(30, 300, dtype=np.float32).reshape(90, 3)
        # Once build() returns, only the gather refers to `source`.
        return WindowGather([source], ThreadPool(2)), weakref.ref(source)

    gather, source_ref = build()
    gc.collect()
    assert source_ref() is not None
    # Churn the allocator so freed memory would likely be reused and overwritten.
    _ = [np.full((90, 3), -1.0, np.float32) for _ in range(50)]
    got = gather.gather([0, 0], [0, 80], 10)
    expected = np.arange(30, 300, dtype=np.float32).reshape(90, 3)
    np.testing.assert_array_equal(got[0], expected[0:10])
    np.testing.assert_array_equal(got[1], expected[80:90])
    del gather, got
    gc.collect()
    assert source_ref() is None, "the gather must not leak its sources once it is gone"


def test_concurrent_gathers_on_one_pool_are_correct() -> None:
    rng = np.random.default_rng(11)
    rows = [3000, 2500, 4000, 1000]
    sources = make_sources(rng, rows, 32)
    gather = WindowGather(sources, ThreadPool(2))
    jobs = [random_samples(rng, rows, 96, 128) for _ in range(32)]  # 1.5 MiB batches

    def run(job: tuple[list[int], list[int]]) -> bool:
        ids, starts = job
        got = gather.gather(ids, starts, 96)
        return bool(np.array_equal(got, reference_gather(sources, ids, starts, 96)))

    with ThreadPoolExecutor(max_workers=4) as executor:
        assert all(executor.map(run, jobs))


def test_gil_is_released_while_copying() -> None:
    # With a huge switch interval the interpreter never forces the GIL away from a thread,
    # so the main thread can run while the worker is still gathering only if the gather
    # itself releases the GIL. The worker repeats its gather until the main thread has
    # looked, so the check does not depend on how long one gather takes.
    rng = np.random.default_rng(5)
    sources = make_sources(rng, [20000], 32)
    gather = WindowGather(sources, ThreadPool(1))
    ids, starts = random_samples(rng, [20000], 256, 64)
    out = np.empty((64, 256, 32), np.float32)
    started = threading.Event()
    stop = threading.Event()
    state = {"finished": False, "gathers": 0}

    def worker() -> None:
        started.set()
        while not stop.is_set() and state["gathers"] < 2000:
            gather.gather(ids, starts, 256, out=out)
            state["gathers"] += 1
        state["finished"] = True

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        started.wait()
        finished_when_main_ran = state["finished"]
        stop.set()
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not finished_when_main_ran, "the main thread only ran after the worker finished"


def test_empty_source_is_allowed_but_has_no_windows() -> None:
    full = np.arange(12, dtype=np.float32).reshape(4, 3)
    gather = WindowGather([np.empty((0, 3), np.float32), full], ThreadPool(2))
    np.testing.assert_array_equal(gather.gather([1], [1], 3)[0], full[1:4])
    with pytest.raises(IndexError, match=r"window \[0, 1\) exceeds array 0 of 0 rows"):
        gather.gather([0], [0], 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_pool_created_before_fork_works_in_the_child() -> None:
    """The child has none of the pool's threads: work runs inline and nothing hangs."""
    pool = ThreadPool(2)
    sources = [np.random.default_rng(0).random((50_000, 32), dtype=np.float32)]
    gather = WindowGather(sources, pool=pool)
    ids, starts = np.zeros(512, np.int64), np.arange(512)
    expected = gather.gather(ids, starts, 128)  # big enough to use the workers
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        ok = np.array_equal(gather.gather(ids, starts, 128), expected)
        del gather, pool  # the destructor must not wait for the parent's threads
        os._exit(0 if ok else 3)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the child hung on a pool created before fork")


def test_an_idle_pool_sleeps_after_polling() -> None:
    # Workers poll for new work for 200 us after a job, then sleep: a pool left idle must
    # not keep a core busy. Process CPU time, not wall time, is what this measures.
    pool = ThreadPool(4)
    sources = [np.zeros((64, 8), dtype=np.float32)]
    gather = WindowGather(sources, pool)
    big = np.zeros(32_768, dtype=np.int64)  # 1 MiB of windows: split across the pool
    gather.gather(big, big, 1)
    time.sleep(0.05)  # past the polling time
    before = time.process_time()
    time.sleep(0.5)
    idle_cpu = time.process_time() - before
    assert idle_cpu < 0.1, f"an idle 4-thread pool used {idle_cpu:.3f} CPU-s in 0.5 s"
