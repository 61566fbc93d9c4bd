"""Chunk staging: the next batches' chunks decoded ahead on a thread, for device residency."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from ticktensor.loaders import ResidentOptions
from ticktensor.loaders._chunk_staging import ChunkStager
from ticktensor.loaders._resident import DeviceChunks
from ticktensor.store import StoreVersion

from .test_resident import CHUNK_BYTES, dataset, version  # noqa: F401 - the fixture


def rows(chunk: int) -> np.ndarray:
    return np.full((4, 2), chunk, dtype=np.float32)


def staging_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ticktensor-stage")]


def test_staged_chunks_are_decoded_ahead_in_order_and_taken_once() -> None:
    order: list[int] = []

    def load(chunk: int) -> np.ndarray:
        order.append(chunk)
        return rows(chunk)

    stager = ChunkStager(load, pin=False, capacity=3)
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
    stager = ChunkStager(rows, pin=False, capacity=2)
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

    stager = ChunkStager(load, pin=False, capacity=4)
    stager.stage([1, 3])
    assert stager.wait_idle(5)
    assert stager.take(1) is not None
    with pytest.raises(OSError, match="disk on fire"):
        stager.take(3)


def test_dropping_the_stager_stops_its_thread() -> None:
    before = set(staging_threads())
    stager = ChunkStager(rows, pin=False, capacity=1)
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
