"""Device residency: chunks held in one device tensor, windows cut there (tested on CPU tensors)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.one_pack import one_pack_store
from ticktensor.errors import ConfigError
from ticktensor.kernels import ThreadPool
from ticktensor.loaders import (
    BlockShuffleOrder,
    FastOptions,
    ResidentOptions,
    SequentialOrder,
    UniformOrder,
    WindowDataset,
)
from ticktensor.loaders._resident import DeviceChunks, ResidentBatches
from ticktensor.loaders.dataloader import DataLoader
from ticktensor.loaders.sharding import ShardPlan
from ticktensor.store import FeatureStats, Layout, Store, StoreVersion

WINDOW = 5
ROWS = (70, 53, 81)
CHUNK_ROWS = 16
CHUNK_BYTES = CHUNK_ROWS * 3 * 4


def build_version(path: Path) -> StoreVersion:
    """Three symbols, chunks of 16 rows, with feature statistics for normalization."""
    rng = np.random.default_rng(0)
    names = ("id", "noise", "frac")
    return one_pack_store(
        path,
        ROWS,
        lambda s, r: np.stack([1000 * s + r, rng.normal(size=r.size), r / 7], axis=1),
        lambda r: r[:, None] * 2,
        names,
        ("y",),
        chunk_rows=CHUNK_ROWS,
        stats=FeatureStats(names, (900.0, 0.5, 3.0), (700.0, 2.0, 0.0), 204, (0, 1)),
        message="resident tests",
    )


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> StoreVersion:
    return build_version(tmp_path_factory.mktemp("store") / "store")


Batch = tuple[torch.Tensor, torch.Tensor, np.ndarray]


def resident_epochs(chunks: DeviceChunks, after_batch: Callable[[], None]) -> list[Batch]:
    """Two resident epochs over ``chunks``: shuffled when every chunk is held, else chunk
    after chunk forwards then backwards (each chunk evicted and loaded again per epoch).
    ``after_batch`` runs after each batch, once the staging thread has refilled what it
    could. Returns each batch with the samples it should hold."""
    n = len(chunks.dataset)
    if chunks.whole:
        orders = [np.random.default_rng(0).permutation(n), np.random.default_rng(1).permutation(n)]
    else:
        orders = [np.arange(n), np.arange(n)[::-1].copy()]
    out = []
    for order in orders:
        plan = ShardPlan(order, 8)
        source = ResidentBatches(chunks, plan, 4)
        for _ in range(plan.num_steps):
            step, _, x, y, _ = next(source)
            out.append((x, y, plan.batch(step)))
            assert chunks._stager.wait_idle(5)
            after_batch()
    return out


def dataset(version: StoreVersion, **options: object) -> WindowDataset:
    return WindowDataset(version, WINDOW, pool=ThreadPool(1), threads=1, **options)  # type: ignore[arg-type]


def batches(loader: DataLoader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]


def assert_same(
    left: list[tuple[torch.Tensor, torch.Tensor]], right: list[tuple[torch.Tensor, torch.Tensor]]
) -> None:
    assert len(left) == len(right)
    for (x1, y1), (x2, y2) in zip(left, right, strict=True):
        torch.testing.assert_close(x1, x2, rtol=0, atol=0)
        torch.testing.assert_close(y1, y2, rtol=0, atol=0)


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("budget", [None, 6 * CHUNK_BYTES])
def test_same_batches_as_the_host_path(
    version: StoreVersion, normalize: bool, budget: int | None
) -> None:
    ds = dataset(version, normalize=normalize, features=["frac", "id", "noise"])
    order = BlockShuffleOrder(seed=3, block_chunks=1)
    host = DataLoader(ds, batch_size=6, fast=FastOptions(order=order))
    resident = DataLoader(
        ds,
        batch_size=6,
        fast=FastOptions(order=order, device="cpu", residency=ResidentOptions(budget_bytes=budget)),
    )
    assert len(resident) == len(host)
    expected, got = batches(host), batches(resident)
    assert_same(got, expected)
    stats = resident.stats()
    assert stats["residency"] == "device"
    assert stats["batches"] == len(host)
    figures = stats["resident"]
    assert figures["whole"] is (budget is None)
    if budget is None:  # every chunk copied once, and never again
        loads = figures["loads"]
        assert 0 < loads <= len(ds.chunks)
        assert_same(batches(resident), batches(host))  # epoch 1, another order
        assert resident.stats()["resident"]["loads"] == loads
        assert resident.stats()["resident"]["evictions"] == 0
    else:
        assert figures["slots"] == 6
        assert figures["evictions"] > 0
    if budget is None:  # each chunk's own rows, once: the whole store
        assert figures["h2d_bytes"] == sum(ROWS) * 3 * 4
    else:  # whole stored chunks into slots
        assert figures["h2d_bytes"] == figures["loads"] * CHUNK_BYTES


def test_windows_across_chunks_and_uniform_order(version: StoreVersion) -> None:
    ds = dataset(version)
    reference = ds.get_batch(np.arange(len(ds)))
    chunks = DeviceChunks(ds, torch.device("cpu"), ResidentOptions(budget_bytes=3 * CHUNK_BYTES))
    for lo in range(0, len(ds), 11):  # windows of 5 rows cross chunks of 16 often
        idx = np.arange(lo, min(lo + 11, len(ds)), dtype=np.int64)
        x, y = chunks.gather(idx)
        np.testing.assert_array_equal(x.numpy(), reference[0][idx])
        np.testing.assert_array_equal(y.numpy(), reference[1][idx])
    assert chunks.loaded <= 3
    host = DataLoader(ds, batch_size=16, shuffle=True, fast=FastOptions(seed=5))
    device = DataLoader(
        ds, batch_size=16, shuffle=True, fast=FastOptions(seed=5, device="cpu", residency="device")
    )
    assert_same(batches(device), batches(host))


def test_sharding_state_and_epochs_match_the_host_path(version: StoreVersion) -> None:
    ds = dataset(version)
    common = {"batch_size": 4}
    plan = {"order": UniformOrder(seed=2), "world_size": 2, "pad": False}
    for rank in (0, 1):
        host = DataLoader(ds, **common, fast=FastOptions(rank=rank, **plan))  # type: ignore[arg-type]
        device = DataLoader(
            ds, **common, fast=FastOptions(rank=rank, device="cpu", residency="device", **plan)
        )  # type: ignore[arg-type]
        assert len(device) == len(host)
        it = iter(device)
        first = [next(it) for _ in range(3)]
        state = device.state_dict()
        assert state["samples_consumed"] == 3 * 4 * 2
        del it, first
        resumed = DataLoader(
            ds, **common, fast=FastOptions(rank=rank, device="cpu", residency="device", **plan)
        )  # type: ignore[arg-type]
        resumed.load_state_dict(state)
        host.load_state_dict(state)
        assert_same(batches(resumed), batches(host))
        assert resumed.epoch == 1
        resumed.set_epoch(4)
        host.set_epoch(4)
        assert_same(batches(resumed), batches(host))


def test_evicts_the_chunk_needed_last(version: StoreVersion) -> None:
    ds = dataset(version)
    chunks = DeviceChunks(ds, torch.device("cpu"), ResidentOptions(budget_bytes=2 * CHUNK_BYTES))
    chunks.require(np.array([0, 1]))
    chunks.require(np.array([2]), upcoming=[np.array([1]), np.array([0])])
    assert chunks.stats["evictions"] == 1
    held = {int(c) for c in np.flatnonzero(chunks._slot_of >= 0)}
    assert held == {1, 2}  # chunk 0 is needed after chunk 1: it went
    with pytest.raises(ConfigError, match="reads 3 chunks"):
        chunks.require(np.array([3, 4, 5]))


def test_options_and_errors(version: StoreVersion) -> None:
    ds = dataset(version)
    with pytest.raises(ConfigError, match="needs device"):
        DataLoader(ds, batch_size=4, fast=FastOptions(residency="device"))
    with pytest.raises(ConfigError, match="residency"):
        DataLoader(ds, batch_size=4, fast=FastOptions(device="cpu", residency="gpu"))
    with pytest.raises(ConfigError, match="holds no chunk"):
        DeviceChunks(ds, torch.device("cpu"), ResidentOptions(budget_bytes=10))
    with pytest.raises(ConfigError, match="budget_bytes"):
        ResidentOptions(budget_bytes=0)
    with pytest.raises(ConfigError, match="lookahead"):
        ResidentOptions(lookahead=0)
    with pytest.raises(ConfigError, match="applies to the fast path only"):
        DataLoader(list(range(4)), batch_size=2, fast=FastOptions(residency="device", device="cpu"))
    loader = DataLoader(
        ds,
        batch_size=4,
        fast=FastOptions(order=SequentialOrder(), device="cpu", residency="device"),
    )
    assert loader.stats()["memory"].startswith("device-resident")
    host = DataLoader(ds, batch_size=4, pin_memory=True)
    expected = "pinned" if torch.cuda.is_available() else "pageable (no CUDA)"
    assert host.stats()["memory"] == expected


@pytest.mark.parametrize("budget", [None, 5 * CHUNK_BYTES])
def test_joined_sessions(tmp_path: Path, budget: int | None) -> None:
    """With ``cross_gaps`` a source is several sessions: chunks start mid-source."""
    store = Store.create(str(tmp_path / "store"), layout=Layout(chunk_rows=CHUNK_ROWS))
    packs = []
    for day, rows in enumerate((37, 21, 50)):
        row = np.arange(rows, dtype=np.float32) + 100 * day
        packs.append(
            store.write_pack(
                session=f"2024-01-0{day + 2}",
                symbols=["S0"],
                offsets=[0, rows],
                ts=(np.arange(rows, dtype=np.int64) + 1000 * day) * 10**9,
                values=np.stack([row, -row, row / 3], axis=1),
                feature_names=("a", "b", "c"),
                labels=row[:, None].copy(),
                label_names=("y",),
            )
        )
    ds = dataset(store.commit(packs=packs), cross_gaps=True)
    assert ds.n_sources == 1
    order = UniformOrder(seed=1)
    host = DataLoader(ds, batch_size=2, fast=FastOptions(order=order))  # at most 4 chunks a batch
    options = ResidentOptions(budget_bytes=budget)
    device = DataLoader(
        ds, batch_size=2, fast=FastOptions(order=order, device="cpu", residency=options)
    )
    assert_same(batches(device), batches(host))


def test_a_device_cache_shuffles_by_blocks(version: StoreVersion) -> None:
    ds = dataset(version)
    small = ResidentOptions(budget_bytes=8 * CHUNK_BYTES)
    device = DataLoader(
        ds, batch_size=4, shuffle=True, fast=FastOptions(seed=7, device="cpu", residency=small)
    )
    assert device.order == BlockShuffleOrder(seed=7, block_chunks=2)
    host = DataLoader(
        ds, batch_size=4, fast=FastOptions(order=BlockShuffleOrder(seed=7, block_chunks=2))
    )
    assert_same(batches(device), batches(host))
    whole = DataLoader(
        ds, batch_size=4, shuffle=True, fast=FastOptions(seed=7, device="cpu", residency="device")
    )
    assert whole.order == UniformOrder(seed=7)


def test_a_pack_read_for_some_symbols_holds_only_their_chunks(tmp_path: Path) -> None:
    """Of a pack, a dataset of one symbol reads few chunks: the device holds those, and
    once they are in, no batch plans loads again (the others are never wanted)."""
    store = Store.create(str(tmp_path / "s"), layout=Layout(chunk_rows=16))
    symbols, rows = ["A", "B", "C"], 64
    n = len(symbols) * rows
    values = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    record = store.write_pack(
        session="d",
        symbols=symbols,
        offsets=np.arange(len(symbols) + 1, dtype=np.int64) * rows,
        ts=np.tile(np.arange(rows, dtype=np.int64), len(symbols)),
        values=values,
        feature_names=["a", "b"],
        labels=np.ones((n, 1), np.float32),
        label_names=["y"],
    )
    ds = WindowDataset(store.commit(packs=[record]), 5, symbols=["B"])
    chunks = DeviceChunks(ds, torch.device("cpu"), ResidentOptions())
    assert chunks.slots == rows // 16  # B's 4 chunks of the pack's 12
    assert chunks.pool.shape[0] == 4
    order = BlockShuffleOrder(seed=1, block_chunks=1)
    host = DataLoader(ds, batch_size=8, fast=FastOptions(order=order))
    device = DataLoader(
        ds, batch_size=8, fast=FastOptions(order=order, device="cpu", residency="device")
    )
    assert_same(batches(device), batches(host))
    assert device.stats()["resident"]["loads"] == 4
    assert_same(batches(device), batches(host))  # the next epoch loads nothing
    figures = device.stats()["resident"]
    assert figures["loads"] == 4
    assert figures["evictions"] == 0
