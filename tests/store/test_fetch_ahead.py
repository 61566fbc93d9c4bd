"""Fetching ahead from object stores: requests in flight at once, within a byte budget."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from tests.loaders.test_packs import write_store
from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, UniformOrder, WindowDataset
from ticktensor.store import StoredChunk
from ticktensor.store._fetch_ahead import FetchAhead


def _chunk(k: int, nbytes: int = 100) -> StoredChunk:
    return StoredChunk(f"shard-{k // 10}", (k % 10) * nbytes, nbytes, k, 0, 1, 1, 1, None, None)


class Requests:
    """A fake request: held until released, counting how many are in flight at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.in_flight = 0
        self.most = 0
        self.made: list[int] = []

    def __call__(self, chunk: StoredChunk) -> bytes:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.made.append(chunk.index)
        self.release.wait(10)
        with self.lock:
            self.in_flight -= 1
        return chunk.index.to_bytes(4, "little")

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + 10
        while len(self.made) < count and time.monotonic() < deadline:
            time.sleep(0.001)


def test_hinted_requests_go_out_at_once_up_to_the_request_limit() -> None:
    requests = Requests()
    ahead = FetchAhead(requests, lambda c: c.nbytes or 0, max_bytes=1 << 20, max_requests=8)
    chunks = [_chunk(k) for k in range(20)]
    ahead.hint(chunks)
    requests.wait_for(8)
    time.sleep(0.05)
    assert requests.made == list(range(8))  # in hint order, no more than the limit
    assert requests.in_flight == 8
    requests.release.set()
    got = [ahead.take(c) for c in chunks]
    assert got == [k.to_bytes(4, "little") for k in range(20)]
    assert requests.most == 8
    assert ahead.held == 0
    assert ahead.requests == 20
    assert ahead.take(_chunk(99)) is None  # never hinted: the caller reads it itself
    ahead.stop()


def test_the_byte_budget_bounds_what_is_requested_and_not_taken() -> None:
    requests = Requests()
    requests.release.set()
    ahead = FetchAhead(requests, lambda c: c.nbytes or 0, max_bytes=350, max_requests=64)
    chunks = [_chunk(k) for k in range(10)]
    ahead.hint(chunks)
    requests.wait_for(3)
    time.sleep(0.05)
    assert requests.made == [0, 1, 2]  # a fourth would pass 350 bytes
    assert ahead.held == 300
    assert ahead.take(chunks[0]) == (0).to_bytes(4, "little")
    requests.wait_for(4)
    assert requests.made == [0, 1, 2, 3]
    ahead.stop()
    assert ahead.held == 0
    assert ahead.take(chunks[5]) is None


def test_a_chunk_not_requested_for_lack_of_budget_is_read_by_its_load() -> None:
    requests = Requests()
    requests.release.set()
    ahead = FetchAhead(requests, lambda c: c.nbytes or 0, max_bytes=200, max_requests=4)
    ahead.hint([_chunk(k) for k in range(2)])  # fetched, never taken: the budget is full
    requests.wait_for(2)
    ahead.hint([_chunk(5)])
    time.sleep(0.05)
    assert requests.made == [0, 1]
    assert ahead.take(_chunk(5)) is None  # no wait: the load reads it itself
    ahead.stop()
    ahead.hint([_chunk(5)])  # a new pass: the budget is free again
    assert ahead.take(_chunk(5)) == (5).to_bytes(4, "little")
    ahead.stop()


def test_a_failed_request_raises_where_its_chunk_is_taken() -> None:
    def fail(chunk: StoredChunk) -> bytes:
        raise OSError(f"no {chunk.index}")

    ahead = FetchAhead(fail, lambda c: 1)
    ahead.hint([_chunk(3)])
    with pytest.raises(OSError, match="no 3"):
        ahead.take(_chunk(3))
    ahead.stop()


class SlowMemory(MemoryFileSystem):
    """An in-memory object store whose every read waits ``delay`` seconds, counting
    the reads in flight at once."""

    protocol = "slowmemory-test"
    delay = 0.01
    lock = threading.Lock()
    in_flight = 0
    most = 0

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
        cls = type(self)
        with cls.lock:
            cls.in_flight += 1
            cls.most = max(cls.most, cls.in_flight)
        try:
            time.sleep(cls.delay)
            data: bytes = super().cat_file(path, start=start, end=end, **kwargs)
            return data
        finally:
            with cls.lock:
                cls.in_flight -= 1


def test_a_first_epoch_from_an_object_store_keeps_many_requests_in_flight() -> None:
    """More requests in flight than loading threads, and the same batches as the store
    read with one request at a time."""
    fsspec.register_implementation(SlowMemory.protocol, SlowMemory, clobber=True)
    url = f"{SlowMemory.protocol}://ahead-{uuid.uuid4().hex}/store"
    write_store(url, "zstd", (True, True, False))  # packs and segments
    ds = WindowDataset(url, 6, threads=2)
    assert not ds.runtime.loader.reader.fetching
    options = FastOptions(order=UniformOrder(seed=1))
    SlowMemory.most = 0
    loader = DataLoader(ds, batch_size=64, fast=options)
    batches = [x.numpy().copy() for x, _ in loader]
    assert SlowMemory.most > ds.threads  # not one request per loading thread
    order = UniformOrder(seed=1).order(ds, 0)
    reference = WindowDataset(url, 6, threads=2)
    reference.runtime.loader.reader.fetch_ahead = lambda chunks: None
    expected = reference.get_batch(order)[0]
    np.testing.assert_array_equal(np.concatenate(batches), expected)
    assert ds.runtime.loader.reader.requests_ahead > 0
    assert not ds.runtime.loader.reader.fetching  # its threads ended with the pass


def test_the_chunk_maps_of_many_records_are_read_at_once_from_an_object_store() -> None:
    fsspec.register_implementation(SlowMemory.protocol, SlowMemory, clobber=True)
    url = f"{SlowMemory.protocol}://maps-{uuid.uuid4().hex}/store"
    version = write_store(url, "zstd", (True, True, False))
    records = [*version.packs, *version.segments]
    SlowMemory.most = 0
    maps = version.chunk_maps(records, "values")
    assert SlowMemory.most > 1
    assert maps == [version.chunk_map(record, "values") for record in records]
