"""The slow link behind ``slowfile://``: its counts, its latency and its bandwidth are real."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest

from ticktensor.bench.goals import check
from ticktensor.bench.integrity import pack_store
from ticktensor.bench.object_store import object_store_rows
from ticktensor.bench.options import BenchOptions
from ticktensor.bench.results import Results
from ticktensor.bench.slow_link import SLICE_BYTES, Link, SlowFileSystem, link_of
from ticktensor.bench.workload import Workload
from ticktensor.loaders import WindowDataset
from ticktensor.store import Codec, open_store


def _slow(latency_s: float, bandwidth: float) -> tuple[SlowFileSystem, Link]:
    fs = fsspec.filesystem("slowfile", latency_s=latency_s, bandwidth=bandwidth)
    assert isinstance(fs, SlowFileSystem)
    link = link_of(fs)
    link.reset()
    return fs, link


@pytest.fixture
def blob(tmp_path: Path) -> tuple[Path, bytes]:
    data = np.random.default_rng(0).bytes(3 * SLICE_BYTES + 12_345)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    return path, data


def test_bytes_through_the_link_are_the_bytes_requested(blob: tuple[Path, bytes]) -> None:
    path, data = blob
    fs, link = _slow(0.0, 1e12)
    url = f"slowfile://{path}"
    ranges = [(0, 10), (5, SLICE_BYTES + 7), (len(data) - 100, len(data)), (100, 100)]
    for start, end in ranges:
        assert fs.cat_file(url, start=start, end=end) == data[start:end]
    assert fs.cat_file(url) == data
    paths = [url] * len(ranges)
    starts, ends = [s for s, _ in ranges], [e for _, e in ranges]
    assert fs.cat_ranges(paths, starts, ends) == [data[s:e] for s, e in ranges]
    with fs.open(url, "rb", block_size=SLICE_BYTES) as f:
        f.seek(1_000)
        assert f.read(50_000) == data[1_000:51_000]
    counts = link.counts()
    requested = 2 * sum(e - s for s, e in ranges) + len(data)
    assert counts.bytes >= requested  # the open file also fetched its read-ahead block
    assert counts.range_requests == 2 * len(ranges) + 2  # the open file fetched once
    link.reset()
    fs.cat_file(url, start=7, end=SLICE_BYTES + 7)
    counts = link.counts()
    assert (counts.requests, counts.range_requests, counts.bytes) == (1, 1, SLICE_BYTES)
    assert counts.busy_s == pytest.approx(SLICE_BYTES / 1e12)
    assert fs.info(url)["size"] == len(data)
    assert fs.ls(str(path.parent), detail=False) == [str(path)]
    assert link.counts().requests == 3  # a lookup and a listing are requests too


def test_concurrent_requests_wait_the_latency_together(blob: tuple[Path, bytes]) -> None:
    path, _ = blob
    latency, n = 0.25, 8
    fs, link = _slow(latency, 1e12)
    url = f"slowfile://{path}"
    started = time.perf_counter()
    fs.cat_ranges([url] * n, list(range(n)), [i + 100 for i in range(n)])
    together = time.perf_counter() - started
    assert link.counts().max_in_flight == n
    # n requests in turn would take n * latency; together they take about one latency.
    assert latency * 0.9 <= together < n * latency / 2
    link.reset()
    threads = [
        threading.Thread(target=fs.cat_file, args=(url,), kwargs={"start": 0, "end": 10})
        for _ in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = link.counts()
    assert counts.max_in_flight == n  # callers on their own threads overlap as well
    assert counts.max_bytes_in_flight == 10 * n


def test_the_bandwidth_is_shared_by_the_requests_in_flight(blob: tuple[Path, bytes]) -> None:
    path, data = blob
    bandwidth = 20e6  # bytes/s: the blob takes about 40 ms on its own
    fs, link = _slow(0.0, bandwidth)
    url = f"slowfile://{path}"
    alone = len(data) / bandwidth
    credit = SLICE_BYTES / bandwidth  # the bucket's one slice of credit
    started = time.perf_counter()
    fs.cat_ranges([url] * 4, [0] * 4, [len(data)] * 4)
    shared = time.perf_counter() - started
    # Four transfers at once take four times as long as one: the cap holds for all of them.
    assert shared >= 0.95 * (4 * alone - credit)
    assert link.counts().bytes == 4 * len(data)
    assert link.seconds(4 * len(data)) == pytest.approx(4 * alone)


def test_a_window_dataset_reads_the_same_data_through_the_link(tmp_path: Path) -> None:
    w = Workload(
        symbols=2, rows=3_000, features=4, window=16, batch=32, chunk_rows=512, cache_dir=tmp_path
    )
    local = pack_store(w, Codec.NONE, lambda _: None)
    url = f"slowfile://{local.location.root}"
    remote = open_store(url, storage_options={"latency_s": 0.001, "bandwidth": 1e10})
    assert not remote.location.is_local
    link = link_of(remote.location.fs)
    link.reset()
    mine, theirs = WindowDataset(local, 16, stride=8), WindowDataset(remote, 16, stride=8)
    assert len(mine) == len(theirs) > 0
    everything = np.arange(len(mine))
    x_local, y_local = mine.get_batch(everything)
    x_remote, y_remote = theirs.get_batch(everything)
    np.testing.assert_array_equal(x_remote, x_local)
    np.testing.assert_array_equal(y_remote, y_local)
    assert link.counts().range_requests > 0


def test_object_store_rows_compare_with_the_link_limit(tmp_path: Path) -> None:
    w = Workload(
        symbols=2, rows=3_000, features=4, window=16, batch=32, chunk_rows=512, cache_dir=tmp_path
    )
    results = Results()
    said: list[str] = []
    options = BenchOptions(passes=1, threads=2)
    object_store_rows(w, options, results, said.append, latency_s=0.001, bandwidth=1e8)
    rows = {row.name: row for row in results.rows}
    for name in ("ticktensor_object_store", "link_limit", "ticktensor_local_disk"):
        speed = rows[name].samples_per_s
        assert speed is not None
        assert speed > 0
    assert rows["link_limit"].stats["link"]["bytes"] > 0
    (goal,) = [g for g in check(results.rows) if "link_limit" in g["goal"]]
    assert goal["ratio"] is not None
    assert any("the link limit" in line for line in said)
