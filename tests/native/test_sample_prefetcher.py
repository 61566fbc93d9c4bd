"""The native sample prefetcher: planned batches in slots, equal to gather_samples, its errors,
depth, shutdown and fork."""

from __future__ import annotations

import gc
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.kernels import ChunkGather, SamplePrefetcher, ThreadPool

Floats = npt.NDArray[np.float32]
Int64s = npt.NDArray[np.int64]

BATCH, TIMEOUT, END = 0, 1, 2  # the kinds next() returns
ROWS = (40, 25, 33)  # rows per source
CHUNK_ROWS = 8
FEATURES = 3
LABELS = 2
WINDOW = 4


@dataclass
class Samples:
    """A chunked ChunkGather with every chunk loaded and a per-sample index over it."""

    gather: ChunkGather
    sample_source: npt.NDArray[np.int32]
    sample_start: Int64s
    labels: Floats
    label_offset: Int64s
    window: int = WINDOW

    def __len__(self) -> int:
        return int(self.sample_start.shape[0])

    def prefetcher(
        self,
        order: npt.ArrayLike,
        first: npt.ArrayLike,
        count: npt.ArrayLike,
        capacity: int,
        depth: int,
        window: int | None = None,
    ) -> SamplePrefetcher:
        return self.gather.prefetcher(
            self.sample_source,
            self.sample_start,
            self.window if window is None else window,
            self.labels,
            self.label_offset,
            np.asarray(order, dtype=np.int64),
            (np.asarray(first, dtype=np.int64), np.asarray(count, dtype=np.int64)),
            capacity,
            depth,
        )

    def reference(self, indices: Int64s) -> tuple[Floats, Floats]:
        """The batch of samples ``indices`` in one plain gather_samples call."""
        return self.gather.gather_samples(
            indices,
            self.sample_source,
            self.sample_start,
            self.window,
            self.labels,
            self.label_offset,
        )

    def slot(self, capacity: int) -> tuple[Floats, Floats]:
        """Slot buffers of ``capacity`` samples, filled with a marker value."""
        x = np.full((capacity, self.window, FEATURES), -7.0, np.float32)
        y = np.full((capacity, LABELS), -7.0, np.float32)
        return x, y


def make_samples(threads: int = 1, seed: int = 0) -> Samples:
    rng = np.random.default_rng(seed)
    sources = [rng.standard_normal((n, FEATURES)).astype(np.float32) for n in ROWS]
    chunk_starts = [list(range(0, n, CHUNK_ROWS)) for n in ROWS]
    gather = ChunkGather(chunk_starts, list(ROWS), FEATURES, ThreadPool(threads))
    chunk = 0
    for values, starts in zip(sources, chunk_starts, strict=True):
        for lo in starts:
            gather.set(chunk, values[lo : lo + CHUNK_ROWS].copy())
            chunk += 1
    per_source = [n - WINDOW + 1 for n in ROWS]
    return Samples(
        gather=gather,
        sample_source=np.repeat(np.arange(len(ROWS), dtype=np.int32), per_source),
        sample_start=np.concatenate([np.arange(k) for k in per_source]).astype(np.int64),
        labels=rng.standard_normal((sum(ROWS), LABELS)).astype(np.float32),
        label_offset=np.concatenate([[0], np.cumsum(ROWS)[:-1]]).astype(np.int64),
    )


def step_samples(order: Int64s, first: int, count: int) -> Int64s:
    """The samples of a step, position by position: ``order[(first + j) % len(order)]``."""
    return np.array([order[(first + j) % len(order)] for j in range(count)], dtype=np.int64)


@contextmanager
def stopped_after(prefetcher: SamplePrefetcher) -> Iterator[SamplePrefetcher]:
    """Stops (joins) the thread on the way out, before the slot buffers may go."""
    try:
        yield prefetcher
    finally:
        prefetcher.stop()


def os_threads() -> set[int]:
    """Ids of this process's OS threads (native threads included)."""
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


def fills_ahead(prefetcher: SamplePrefetcher, batches: int) -> bool:
    """Whether ``batches`` filled batches come to wait for the consumer."""
    return wait_until(lambda: prefetcher.waiting == batches)


def wait_for_child(pid: int, seconds: float) -> int:
    """The child's exit code; kills it and fails the test when it runs past ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child did not end within {seconds} s")


@pytest.fixture(scope="module")
def samples() -> Samples:
    return make_samples(threads=2)


# -- batches against the reference -----------------------------------------------------------


def test_batches_equal_gather_samples_in_step_order(samples: Samples) -> None:
    rng = np.random.default_rng(5)
    n = len(samples)
    order = rng.permutation(n).astype(np.int64)
    capacity = 8
    # Full steps, a step that wraps past the end of the order, an empty step, one that
    # starts past the end (a padded rank), and a short last step.
    plan = [(0, 8), (8, 8), (n - 3, 8), (16, 0), (n + 2, 5), (24, 8), (n - 3, 3)]
    first = [f for f, _ in plan]
    count = [c for _, c in plan]
    buffers = [samples.slot(capacity) for _ in range(3)]
    # The prefetcher keeps its own references to the index arrays it was given.
    prefetcher = samples.prefetcher(order.copy(), first, count, capacity, depth=2)
    gc.collect()
    seen_steps, seen_slots = [], set()
    with stopped_after(prefetcher):
        assert prefetcher.slots == 0
        assert prefetcher.next(0.01)[0] == TIMEOUT  # nothing to fill into yet
        for x, y in buffers:
            prefetcher.add_slot(x, y)
        assert prefetcher.slots == 3
        while True:
            kind, step, slot, got = prefetcher.next(5.0)
            if kind == END:
                break
            assert kind == BATCH, (kind, step)
            f, c = plan[step]
            assert got == c
            want_x, want_y = samples.reference(step_samples(order, f, c))
            x, y = buffers[slot]
            np.testing.assert_array_equal(x[:got], want_x)
            np.testing.assert_array_equal(y[:got], want_y)
            seen_steps.append(step)
            seen_slots.add(slot)
            prefetcher.release(slot)
        assert seen_steps == list(range(len(plan)))
        assert seen_slots == {0, 1, 2}  # 7 batches from 3 slots: released ones were refilled
        assert prefetcher.next(0.01)[0] == END  # and it stays ended
        assert wait_until(lambda: not prefetcher.running)
        assert prefetcher.failed_step == -1
        assert prefetcher.fill_seconds > 0


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    order_size=st.integers(1, 30),
    capacity=st.integers(1, 40),
    n_steps=st.integers(0, 12),
    depth=st.integers(1, 3),
    n_slots=st.integers(1, 5),
)
def test_any_plan_gives_the_reference_batches(
    samples: Samples,
    seed: int,
    order_size: int,
    capacity: int,
    n_steps: int,
    depth: int,
    n_slots: int,
) -> None:
    """Orders with repeats, steps anywhere (also longer than the order: several wraps)."""
    rng = np.random.default_rng(seed)
    order = rng.integers(0, len(samples), order_size).astype(np.int64)
    first = rng.integers(0, 3 * order_size, n_steps)
    count = rng.integers(0, capacity + 1, n_steps)
    buffers = [samples.slot(capacity) for _ in range(n_slots)]
    prefetcher = samples.prefetcher(order, first, count, capacity, depth)
    with stopped_after(prefetcher):
        for x, y in buffers:
            prefetcher.add_slot(x, y)
        for step in range(n_steps):
            kind, got_step, slot, got = prefetcher.next(5.0)
            assert (kind, got_step, got) == (BATCH, step, count[step])
            want_x, want_y = samples.reference(step_samples(order, first[step], count[step]))
            np.testing.assert_array_equal(buffers[slot][0][:got], want_x)
            np.testing.assert_array_equal(buffers[slot][1][:got], want_y)
            prefetcher.release(slot)
        assert prefetcher.next(5.0)[0] == END


def test_the_prefetcher_keeps_what_it_reads_alive() -> None:
    """The gather, its pool and the index arrays may all be dropped by the caller."""
    samples = make_samples(threads=2, seed=4)
    order = np.random.default_rng(4).permutation(len(samples)).astype(np.int64)
    want = [samples.reference(order[8 * s : 8 * s + 8]) for s in range(5)]
    prefetcher = samples.prefetcher(order, np.arange(5) * 8, [8] * 5, capacity=8, depth=2)
    del samples, order
    gc.collect()
    buffers = [
        (np.zeros((8, WINDOW, FEATURES), np.float32), np.zeros((8, LABELS), np.float32))
        for _ in range(2)
    ]
    with stopped_after(prefetcher):
        for x, y in buffers:
            prefetcher.add_slot(x, y)
        for step, (want_x, want_y) in enumerate(want):
            kind, got_step, slot, _ = prefetcher.next(5.0)
            assert (kind, got_step) == (BATCH, step)
            np.testing.assert_array_equal(buffers[slot][0], want_x)
            np.testing.assert_array_equal(buffers[slot][1], want_y)
            prefetcher.release(slot)


def test_slots_added_while_the_thread_fills_are_used(samples: Samples) -> None:
    """add_slot() from the consumer's thread while the native thread gathers into others."""
    rng = np.random.default_rng(9)
    steps, capacity = 40, 64
    order = rng.integers(0, len(samples), 500).astype(np.int64)
    first = rng.integers(0, 500, steps)
    prefetcher = samples.prefetcher(order, first, [capacity] * steps, capacity, depth=3)
    buffers = [samples.slot(capacity)]
    with stopped_after(prefetcher):
        prefetcher.add_slot(*buffers[0])
        for step in range(steps):
            if len(buffers) < 24:
                buffers.append(samples.slot(capacity))
                assert prefetcher.add_slot(*buffers[-1]) == len(buffers) - 1
            kind, got_step, slot, _ = prefetcher.next(5.0)
            assert (kind, got_step) == (BATCH, step)
            want_x, want_y = samples.reference(step_samples(order, first[step], capacity))
            np.testing.assert_array_equal(buffers[slot][0], want_x)
            np.testing.assert_array_equal(buffers[slot][1], want_y)
            prefetcher.release(slot)
        assert prefetcher.slots == 24


def test_next_without_slots_times_out(samples: Samples) -> None:
    prefetcher = samples.prefetcher(np.arange(10), [0], [4], capacity=4, depth=1)
    with stopped_after(prefetcher):
        started = time.perf_counter()
        kind, *_ = prefetcher.next(0.2)
        took = time.perf_counter() - started
        assert kind == TIMEOUT
        assert 0.15 <= took < 1.5
        assert prefetcher.running
        assert prefetcher.waiting == 0


def test_no_steps_ends_at_once(samples: Samples) -> None:
    empty = np.empty(0, np.int64)
    prefetcher = samples.prefetcher(empty, empty, empty, capacity=4, depth=1)
    with stopped_after(prefetcher):
        assert prefetcher.next(5.0)[0] == END


# -- errors --------------------------------------------------------------------------------


def test_a_sample_out_of_range_ends_the_thread_after_the_batches_before_it(
    samples: Samples,
) -> None:
    n = len(samples)
    order = np.random.default_rng(2).permutation(n).astype(np.int64)
    bad_step, capacity = 3, 4
    order[bad_step * capacity + 1] = n + 5  # read by step 3 only
    steps = 6
    first = np.arange(steps) * capacity
    prefetcher = samples.prefetcher(order, first, [capacity] * steps, capacity, depth=2)
    buffers = [samples.slot(capacity) for _ in range(2)]
    with stopped_after(prefetcher):
        for x, y in buffers:
            prefetcher.add_slot(x, y)
        for step in range(bad_step):
            kind, got_step, slot, got = prefetcher.next(5.0)
            assert (kind, got_step, got) == (BATCH, step, capacity)
            want_x, want_y = samples.reference(order[step * capacity : (step + 1) * capacity])
            np.testing.assert_array_equal(buffers[slot][0], want_x)
            np.testing.assert_array_equal(buffers[slot][1], want_y)
            prefetcher.release(slot)
        with pytest.raises(IndexError, match=f"sample {n + 5} out of range"):
            prefetcher.next(5.0)
        assert prefetcher.failed_step == bad_step
        assert prefetcher.next(1.0)[0] == END  # raised once, then the end
        assert not prefetcher.running


def test_a_cleared_chunk_surfaces_as_runtime_error() -> None:
    samples = make_samples(threads=1, seed=1)
    n = len(samples)
    order = np.arange(n, dtype=np.int64)
    # Steps 0 and 1 read source 0's first rows; step 2 reads source 2's last chunk.
    last = int(np.flatnonzero(samples.sample_source == 2)[-1])
    first, count = [0, 4, last - 3], [4, 4, 4]
    prefetcher = samples.prefetcher(order, first, count, capacity=4, depth=1)
    buffers = [samples.slot(4) for _ in range(2)]
    with stopped_after(prefetcher):
        samples.gather.clear(samples.gather.n_chunks - 1)  # before the thread has a slot
        for x, y in buffers:
            prefetcher.add_slot(x, y)
        for step in range(2):
            kind, got_step, slot, _ = prefetcher.next(5.0)
            assert (kind, got_step) == (BATCH, step)
            want_x, _ = samples.reference(order[4 * step : 4 * step + 4])
            np.testing.assert_array_equal(buffers[slot][0], want_x)
            prefetcher.release(slot)
        with pytest.raises(RuntimeError, match="is not loaded"):
            prefetcher.next(5.0)
        assert prefetcher.failed_step == 2
        assert prefetcher.next(1.0)[0] == END


def test_argument_errors(samples: Samples) -> None:
    order = np.arange(len(samples), dtype=np.int64)
    prefetcher = samples.prefetcher(order, [0, 4], [4, 4], capacity=4, depth=1)
    x, y = samples.slot(4)
    with stopped_after(prefetcher):
        with pytest.raises(IndexError, match="slot 0 out of range"):
            prefetcher.release(0)
        slot = prefetcher.add_slot(x, y)
        assert slot == 0
        kind, _, got_slot, _ = prefetcher.next(5.0)
        assert (kind, got_slot) == (BATCH, 0)
        prefetcher.release(0)
        with pytest.raises(ValueError, match="slot 0 is not held by the consumer"):
            prefetcher.release(0)  # released already
        with pytest.raises(IndexError, match="slot 7 out of range for 1 slots"):
            prefetcher.release(7)
        small_x, small_y = samples.slot(3)
        with pytest.raises(ValueError, match="slot: expected 48 feature and 8 label elements"):
            prefetcher.add_slot(small_x, y)
        with pytest.raises(ValueError, match="got 48 and 6"):
            prefetcher.add_slot(x, small_y)
        assert prefetcher.slots == 1
    with pytest.raises(ValueError, match="step 1: expected a position >= 0 and 0 to 4 samples"):
        samples.prefetcher(order, [0, 4], [4, 5], capacity=4, depth=1)
    with pytest.raises(ValueError, match="got position -1"):
        samples.prefetcher(order, [-1], [4], capacity=4, depth=1)
    with pytest.raises(ValueError, match="window: expected >= 1, got 0"):
        samples.prefetcher(order, [0], [4], capacity=4, depth=1, window=0)
    with pytest.raises(ValueError, match="depth: expected >= 1, got 0"):
        samples.prefetcher(order, [0], [4], capacity=4, depth=0)
    with pytest.raises(ValueError, match="step 0 takes samples of an empty order"):
        samples.prefetcher(np.empty(0, np.int64), [0], [1], capacity=4, depth=1)
    with pytest.raises(ValueError, match="step_first and step_count"):
        samples.prefetcher(order, [0, 4], [4], capacity=4, depth=1)


# -- depth, shutdown -----------------------------------------------------------------------


def test_at_most_depth_batches_wait(samples: Samples) -> None:
    depth, capacity, steps = 2, 4, 10
    order = np.arange(len(samples), dtype=np.int64)
    prefetcher = samples.prefetcher(
        order, np.arange(steps) * capacity, [capacity] * steps, capacity, depth
    )
    buffers = [samples.slot(capacity) for _ in range(6)]
    with stopped_after(prefetcher):
        for x, y in buffers:
            prefetcher.add_slot(x, y)
        assert wait_until(lambda: prefetcher.waiting == depth)
        time.sleep(0.1)  # four slots are still free: the thread must not use them
        assert prefetcher.waiting == depth
        marked = [slot for slot, (x, _) in enumerate(buffers) if (x == -7.0).all()]
        assert len(marked) == 6 - depth  # untouched
        taken = []
        for step in range(6):  # the consumer keeps every batch
            kind, got_step, slot, _ = prefetcher.next(5.0)
            assert (kind, got_step) == (BATCH, step)
            taken.append(slot)
            assert prefetcher.waiting <= depth
        assert sorted(taken) == list(range(6))
        assert prefetcher.next(0.1)[0] == TIMEOUT  # every slot is held: nothing is refilled
        for slot in taken:
            prefetcher.release(slot)
        for step in range(6, steps):
            kind, got_step, slot, _ = prefetcher.next(5.0)
            assert (kind, got_step) == (BATCH, step)
            prefetcher.release(slot)
        assert prefetcher.next(5.0)[0] == END


def test_stop_joins_the_thread_and_is_idempotent() -> None:
    samples = make_samples(threads=1)  # a pool of one starts no worker thread
    before = os_threads()
    order = np.arange(len(samples), dtype=np.int64)
    prefetcher = samples.prefetcher(order, [0, 4, 8], [4, 4, 4], capacity=4, depth=2)
    x, y = samples.slot(4)
    started = os_threads() - before
    assert len(started) == 1
    assert prefetcher.running
    prefetcher.add_slot(x, y)
    assert wait_until(lambda: prefetcher.waiting == 1)
    prefetcher.stop()
    assert not prefetcher.running  # the thread left run() before stop() returned
    # The kernel drops a joined thread's task entry a moment after the join.
    assert wait_until(lambda: not started & os_threads(), seconds=1.0)
    prefetcher.stop()
    assert prefetcher.next(0.05)[0] == END  # the waiting batch was dropped
    assert prefetcher.waiting == 0


def test_dropping_a_running_prefetcher_joins_its_thread() -> None:
    samples = make_samples(threads=1)
    before = os_threads()
    prefetcher = samples.prefetcher(np.arange(20), [0, 4], [4, 4], capacity=4, depth=1)
    started = os_threads() - before
    assert len(started) == 1
    del prefetcher  # waiting for a slot; no slot was ever added
    gc.collect()
    assert wait_until(lambda: not started & os_threads(), seconds=1.0)


# -- fork ----------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_an_inherited_prefetcher_reports_nothing_in_a_forked_child() -> None:
    """The child has no copy of the thread: next() must time out, not hang, and dropping
    the prefetcher must not join (or terminate on) the parent's thread."""
    samples = make_samples(threads=1)
    order = np.arange(len(samples), dtype=np.int64)
    prefetcher = samples.prefetcher(order, np.arange(6) * 4, [4] * 6, capacity=4, depth=2)
    buffers = [samples.slot(4) for _ in range(4)]
    try:
        for x, y in buffers:
            prefetcher.add_slot(x, y)
        assert fills_ahead(prefetcher, 2)  # the thread is busy at fork time
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                signal.alarm(10)  # a hang kills the child, which the parent reports
                started = time.perf_counter()
                kind = prefetcher.next(0.05)[0]
                took = time.perf_counter() - started
                if prefetcher.running:
                    code = 3
                elif kind != TIMEOUT:
                    code = 4
                elif took > 2.0:
                    code = 5
                else:
                    prefetcher.stop()  # no thread to stop here
                    del prefetcher  # the last reference: the destructor runs
                    gc.collect()
                    code = 0
            finally:
                os._exit(code)
        status = wait_for_child(pid, seconds=30)
        assert status == 0, {
            1: "the child raised",
            3: "running is True in the child",
            4: "next() in the child did not time out",
            5: "next(0.05) in the child took over 2 s",
        }.get(status, f"the child ended with status {status} (-14: it hung until its 10 s alarm)")
        for step in range(6):  # the parent's thread goes on
            kind, got_step, slot, _ = prefetcher.next(5.0)
            assert (kind, got_step) == (BATCH, step)
            prefetcher.release(slot)
    finally:
        prefetcher.stop()
