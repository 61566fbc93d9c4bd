"""Chunk staging: the next batches' chunks decoded ahead on a thread, for device residency."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
import torch

from ticktensor.loaders import ResidentOptions, WindowDataset
from ticktensor.loaders._chunk_staging import ChunkStager
from ticktensor.loaders._resident import DeviceChunks
from ticktensor.store import StoreVersion

from .test_fences import FakeStream
from .test_resident import CHUNK_BYTES, dataset, resident_epochs, version  # noqa: F401


def rows(chunk: int) -> np.ndarray:
    return np.full((4, 2), chunk, dtype=np.float32)


def staging_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ticktensor-stage")]


def test_staged_chunks_are_decoded_ahead_in_order_and_taken_once() -> None:
    order: list[int] = []

    def load(chunk: int) -> np.ndarray:
        order.append(chunk)
        return rows(chunk)

    stager = ChunkStager(load, shape=(4, 2), pin=False, capacity=3)
    stager.stage([5, 2, 9])
    assert stager.wait_idle(5)
    assert order == [5, 2, 9]
    assert stager.held == 3
    staged = stager.take(2)
    assert staged is not None
    assert torch.equal(staged, torch.from_numpy(rows(2)))
    assert stager.take(2) is None  # taken once
    assert stager.take(7) is None  # never asked for
    assert stager.staged_total == 3


def test_capacity_bounds_what_is_held_and_a_new_request_replaces_the_old() -> None:
    stager = ChunkStager(rows, shape=(4, 2), pin=False, capacity=2)
    stager.stage([1, 2, 3, 4])
    assert stager.wait_idle(5)
    assert stager.held == 2  # 1 and 2; 3 and 4 wait for room
    stager.stage([2, 6])  # 1 is no longer ahead: dropped; 6 takes its room
    assert stager.wait_idle(5)
    assert stager.take(1) is None
    assert stager.take(2) is not None
    assert stager.take(6) is not None


def test_a_decode_error_reaches_the_consumer_with_its_chunk() -> None:
    def load(chunk: int) -> np.ndarray:
        if chunk == 3:
            raise OSError("chunk 3: disk on fire")
        return rows(chunk)

    stager = ChunkStager(load, shape=(4, 2), pin=False, capacity=4)
    stager.stage([1, 3])
    assert stager.wait_idle(5)
    assert stager.take(1) is not None
    with pytest.raises(OSError, match="disk on fire"):
        stager.take(3)


def test_dropping_the_stager_stops_its_thread() -> None:
    before = set(staging_threads())
    stager = ChunkStager(rows, shape=(4, 2), pin=False, capacity=1)
    stager.stage([1, 2])  # the thread waits for room after chunk 1
    assert stager.wait_idle(5)
    started = set(staging_threads()) - before
    assert started
    del stager
    deadline = time.monotonic() + 5
    while any(t.is_alive() for t in started) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.is_alive() for t in started)


def test_a_staged_miss_costs_the_consumer_no_decode(version: StoreVersion) -> None:  # noqa: F811
    ds = dataset(version)
    chunks = DeviceChunks(ds, torch.device("cpu"), ResidentOptions(budget_bytes=4 * CHUNK_BYTES))
    chunks.stage([np.array([0, 1]), np.array([2])])
    assert chunks._stager.wait_idle(5)
    decoded_here = []
    original = ds.load_chunk

    def counting(chunk: int) -> np.ndarray:
        decoded_here.append(chunk)
        return original(chunk)

    ds.load_chunk = counting  # type: ignore[method-assign]
    chunks.require(np.array([0, 1]))
    chunks.require(np.array([2, 3]))  # 3 was not staged: decoded here
    assert decoded_here == [3]
    assert chunks.stats["loaded_here"] == 1
    assert chunks.stats["loads"] == 4
    assert chunks.stats["evictions"] == 0
    for chunk in range(4):
        slot = int(chunks._slot_of[chunk])
        want = original(chunk)
        assert torch.equal(chunks.pool[slot, : want.shape[0]], torch.from_numpy(want))


def test_a_chunk_being_staged_is_waited_for_not_decoded_again(
    version: StoreVersion,  # noqa: F811
) -> None:
    """The consumer needs a chunk while the staging thread is decoding it: it takes the
    staged rows when they are ready instead of decoding the chunk a second time."""
    ds = dataset(version)
    original = ds.load_chunk
    loads: list[tuple[int, str]] = []
    staging = threading.Event()  # the staging thread has begun decoding chunk 1
    consumer_loaded = threading.Event()

    def counting(chunk: int) -> np.ndarray:
        thread = threading.current_thread().name
        loads.append((chunk, thread))
        if chunk == 1 and thread.startswith("ticktensor-stage"):
            staging.set()
            consumer_loaded.wait(0.5)  # a slow decode, cut short if the consumer loads it
        elif chunk == 1:
            consumer_loaded.set()
        return original(chunk)

    ds.load_chunk = counting  # type: ignore[method-assign]
    chunks = DeviceChunks(ds, torch.device("cpu"), ResidentOptions(budget_bytes=4 * CHUNK_BYTES))
    chunks.stage([np.array([1])])
    assert staging.wait(5)
    chunks.require(np.array([1]))
    assert [chunk for chunk, _ in loads] == [1], loads
    assert chunks.stats["loaded_here"] == 0
    want = original(1)
    slot = int(chunks._slot_of[1])
    assert torch.equal(chunks.pool[slot, : want.shape[0]], torch.from_numpy(want))


def test_take_waits_for_the_chunk_being_decoded_and_raises_its_error() -> None:
    started, go = threading.Event(), threading.Event()

    def load(chunk: int) -> np.ndarray:
        started.set()
        assert go.wait(5)
        if chunk == 3:
            raise OSError("chunk 3: disk on fire")
        return rows(chunk)

    stager = ChunkStager(load, shape=(4, 2), pin=False, capacity=2)
    for chunk in (2, 3):
        started.clear()
        go.clear()
        stager.stage([chunk])
        assert started.wait(5)
        threading.Timer(0.05, go.set).start()
        if chunk == 2:
            staged = stager.take(2)
            assert staged is not None
            assert torch.equal(staged, torch.from_numpy(rows(2)))
            stager.release(staged)
        else:
            with pytest.raises(OSError, match="disk on fire"):
                stager.take(3)


def test_page_locked_buffers_are_allocated_outside_the_stager_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Page-locked allocation takes milliseconds: under the lock it would hold up the
    consumer's ``take`` and ``release`` (and ``stage`` at every batch) meanwhile."""
    under_lock: list[bool] = []
    empty = torch.empty
    lock: list[Any] = []

    def pinned_empty(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        if pin_memory:  # CPU-only torch cannot pin: the stand-in records who allocates
            under_lock.append(lock[0]._is_owned())
        return empty(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", pinned_empty)
    stager = ChunkStager(rows, shape=(4, 2), pin=True, capacity=2)
    lock.append(stager._shared.lock)
    stager.stage([1, 2, 3])
    assert stager.wait_idle(5)
    taken = [stager.take(chunk) for chunk in (1, 2)]  # held: 3 needs a third buffer
    assert stager.wait_idle(5)
    assert stager.take(3) is not None
    assert all(rows is not None for rows in taken)
    assert stager.buffers == 3
    assert under_lock == [False] * 3


class LaggingChunks(DeviceChunks):
    """Device chunks whose device work is queued on a :class:`FakeStream`: a copy reads its
    host rows, and a gather the pool, only when the stream runs it, as on a busy GPU."""

    def __init__(
        self, ds: WindowDataset, options: ResidentOptions, stream: FakeStream, fences: Any
    ) -> None:
        super().__init__(ds, torch.device("cpu"), options, fences=fences)
        self.stream = stream
        self.changed_under_copy = 0  # copies whose host rows changed while they waited

    def _copy_in(self, device: torch.Tensor, host: torch.Tensor) -> None:
        queued = host.numpy().tobytes()  # what the copy has to read (padding rows: NaN)

        def run() -> None:
            if host.numpy().tobytes() != queued:
                self.changed_under_copy += 1
            device.copy_(host)

        self.stream.queue(run)

    def _cut(self, first: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.empty((first.shape[0], self.window, self.n_features))
        y = torch.empty((first.shape[0], self.dataset.n_labels))
        cut = super()._cut

        def run() -> None:
            x_now, y_now = cut(first)
            x.copy_(x_now)
            y.copy_(y_now)

        self.stream.queue(run)
        return x, y


class RefCountsOnly:
    """The broken rule: a staging buffer counts as free as soon as its copy is queued."""

    def record(self) -> Any:
        return self

    def enter_thread(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


def lagging_epochs(
    store: StoreVersion, budget: int | None, behind: int | None, broken: bool = False
) -> tuple[LaggingChunks, list[tuple[torch.Tensor, torch.Tensor, np.ndarray]]]:
    """Two resident epochs with the stream ``behind`` operations behind the consumer
    (``None``: it runs nothing until the end); the batches and the samples they hold."""
    ds = dataset(store)
    stream = FakeStream()
    options = ResidentOptions(budget_bytes=budget, lookahead=4)
    chunks = LaggingChunks(ds, options, stream, RefCountsOnly() if broken else stream)
    out = resident_epochs(chunks, lambda: None if behind is None else stream.lag(behind))
    stream.run_until(10**9)
    return chunks, out


@pytest.mark.parametrize("budget", [None, 6 * CHUNK_BYTES])
@pytest.mark.parametrize("behind", [0, 3, 9, None])
def test_staging_buffers_wait_for_the_copies_that_read_them(
    version: StoreVersion,  # noqa: F811
    budget: int | None,
    behind: int | None,
) -> None:
    chunks, batches = lagging_epochs(version, budget, behind)
    assert chunks.whole == (budget is None)
    assert chunks.stats["loads"] - chunks.stats["loaded_here"] >= 5  # copies from buffers
    if not chunks.whole:  # each chunk is loaded once per epoch: buffers were reused
        assert chunks._stager.staged_total > chunks._stager.buffers
    assert chunks.changed_under_copy == 0
    ds = chunks.dataset
    for x, y, samples in batches:
        want_x, want_y = ds.get_batch(samples)
        assert torch.equal(x, torch.from_numpy(want_x))
        assert torch.equal(y, torch.from_numpy(want_y))


def test_without_fences_the_emulation_catches_refilled_buffers(
    version: StoreVersion,  # noqa: F811
) -> None:
    """The control: buffers refilled as soon as their copies are queued are overwritten
    under the copies of a stream that lags, and the batches come out wrong."""
    chunks, batches = lagging_epochs(version, 6 * CHUNK_BYTES, None, broken=True)
    assert chunks.changed_under_copy > 5
    ds = chunks.dataset
    wrong = sum(
        not torch.equal(x, torch.from_numpy(ds.get_batch(samples)[0])) for x, _, samples in batches
    )
    assert wrong > len(batches) // 4


def test_the_staging_thread_makes_the_fences_device_current() -> None:
    """The staging thread waits on fences: it must first make their device current (a
    new thread starts on GPU 0, where waiting would open a second CUDA context)."""

    class Recording(FakeStream):
        def __init__(self) -> None:
            super().__init__()
            self.threads: list[str] = []

        def enter_thread(self) -> None:
            self.threads.append(threading.current_thread().name)

    fences = Recording()
    stager = ChunkStager(rows, shape=(4, 2), pin=False, capacity=2, fences=fences)
    stager.stage([1, 2])
    assert stager.wait_idle(5)
    assert fences.threads, "the staging thread never entered the fences' device"
    assert all(name.startswith("ticktensor-stage") for name in fences.threads)
