"""Orders: determinism, permutations, block structure, cross sections, measured shuffle quality."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.errors import ConfigError
from ticktensor.kernels import ThreadPool, random_permutation
from ticktensor.loaders import (
    BlockShuffleOrder,
    CrossSectionalOrder,
    Order,
    SequentialOrder,
    UniformOrder,
    WindowDataset,
    shuffle_quality,
)

from .test_dataset import build_store

SEC = 10**9


@dataclass
class FakeIndex:
    """Just the index arrays orders read, for large synthetic datasets without a store."""

    sample_ts: npt.NDArray[np.int64]
    sample_symbol: npt.NDArray[np.int32]
    sample_chunk: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.sample_ts.shape[0])


def fake_dataset(symbols: int, rows: int, window: int, chunk_rows: int) -> WindowDataset:
    """Every start of ``symbols`` aligned 1 s series of ``rows`` rows, one segment each."""
    starts = np.arange(rows - window + 1, dtype=np.int64)
    chunks_per = -(-rows // chunk_rows)
    index = FakeIndex(
        sample_ts=np.tile((starts + window - 1) * SEC, symbols),
        sample_symbol=np.repeat(np.arange(symbols, dtype=np.int32), starts.size),
        sample_chunk=(np.arange(symbols)[:, None] * chunks_per + starts // chunk_rows).ravel(),
    )
    return cast(WindowDataset, index)


ORDERS: list[Any] = [
    UniformOrder(seed=3),
    BlockShuffleOrder(seed=3, block_chunks=2),
    CrossSectionalOrder(seed=3),
    CrossSectionalOrder(seed=3, clock_ns=5 * SEC),
]


@pytest.mark.parametrize("order", [*ORDERS, SequentialOrder()], ids=repr)
def test_orders_are_deterministic(order: Order) -> None:
    ds = fake_dataset(symbols=3, rows=200, window=10, chunk_rows=32)
    assert isinstance(order, Order)
    first = order.order(ds, epoch=4)
    assert first.dtype == np.int64
    np.testing.assert_array_equal(first, order.order(ds, epoch=4))
    assert np.unique(first).size == first.size  # no sample twice
    assert first.size == 0 or (first.min() >= 0 and first.max() < len(ds))
    if not isinstance(order, SequentialOrder):
        assert not np.array_equal(first, order.order(ds, epoch=5))


@pytest.mark.parametrize("order", [UniformOrder(1), SequentialOrder(), BlockShuffleOrder(1, 3)])
def test_permutation_orders_visit_every_sample(order: Order) -> None:
    ds = fake_dataset(symbols=2, rows=150, window=7, chunk_rows=20)
    np.testing.assert_array_equal(np.sort(order.order(ds, 0)), np.arange(len(ds)))


def test_uniform_is_the_native_permutation_of_seed_and_epoch() -> None:
    ds = fake_dataset(symbols=2, rows=50, window=3, chunk_rows=8)
    expected = random_permutation(len(ds), 9, 2, pool=ThreadPool(1))
    np.testing.assert_array_equal(UniformOrder(seed=9).order(ds, 2), expected)
    assert not np.array_equal(UniformOrder(seed=9).order(ds, 3), expected)
    with pytest.raises(ConfigError, match="epoch"):
        UniformOrder().order(ds, -1)


@settings(max_examples=60, deadline=None)
@given(
    symbols=st.integers(1, 4),
    rows=st.integers(5, 300),
    chunk_rows=st.integers(1, 64),
    block_chunks=st.integers(1, 6),
    seed=st.integers(0, 2**32),
)
def test_block_shuffle_visits_blocks_of_whole_chunks(
    symbols: int, rows: int, chunk_rows: int, block_chunks: int, seed: int
) -> None:
    ds = fake_dataset(symbols, rows, window=min(5, rows), chunk_rows=chunk_rows)
    order = BlockShuffleOrder(seed, block_chunks).order(ds, epoch=1)
    np.testing.assert_array_equal(np.sort(order), np.arange(len(ds)))
    chunk = ds.sample_chunk[order]
    # Reference: cut the order where the set of chunks seen since the last cut reaches
    # block_chunks and a new chunk begins; each chunk must then live in one block only.
    blocks: list[set[int]] = [set()]
    for c in chunk.tolist():
        if c not in blocks[-1] and len(blocks[-1]) == block_chunks:
            blocks.append(set())
        blocks[-1].add(c)
    seen = [c for block in blocks for c in block]
    assert len(seen) == len(set(seen)) == np.unique(ds.sample_chunk).size
    assert all(len(b) == block_chunks for b in blocks[:-1])


def reference_groups(ds: WindowDataset, clock_ns: int | None) -> list[list[int]]:
    """Cross sections one sample at a time: latest sample per (time key, symbol), all present."""
    best: dict[int, dict[int, int]] = {}
    for i in range(len(ds)):
        ts = int(ds.sample_ts[i])
        key = ts if clock_ns is None else ts // clock_ns
        per_symbol = best.setdefault(key, {})
        symbol = int(ds.sample_symbol[i])
        j = per_symbol.get(symbol)
        if j is None or int(ds.sample_ts[j]) <= ts:
            per_symbol[symbol] = i
    n_symbols = len(set(ds.sample_symbol.tolist()))
    return [
        [best[key][s] for s in sorted(best[key])]
        for key in sorted(best)
        if len(best[key]) == n_symbols
    ]


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> WindowDataset:
    version = build_store(tmp_path_factory.mktemp("orders") / "store")
    return WindowDataset(version, 4, pool=ThreadPool(1))


@pytest.mark.parametrize("clock_ns", [None, 2 * SEC, 7 * SEC])
def test_cross_sections_match_reference(real: WindowDataset, clock_ns: int | None) -> None:
    order = CrossSectionalOrder(seed=5, clock_ns=clock_ns)
    groups = order.groups(real)
    expected = reference_groups(real, clock_ns)
    assert expected, "the fixture should have complete cross sections"
    assert [g.tolist() for g in groups] == expected
    assert order.group_size(real) == 3
    for g in groups:
        key = real.sample_ts[g] if clock_ns is None else real.sample_ts[g] // clock_ns
        assert np.unique(key).size == 1
        assert sorted(real.sample_symbol[g].tolist()) == [0, 1, 2]
    # The epoch order is the same groups, whole, in a shuffled sequence.
    epoch = order.order(real, epoch=0).reshape(-1, 3)
    assert sorted(map(tuple, epoch.tolist())) == sorted(map(tuple, expected))
    assert epoch.tolist() != expected


def test_cross_sections_on_an_aligned_clock() -> None:
    ds = fake_dataset(symbols=4, rows=60, window=8, chunk_rows=16)
    groups = CrossSectionalOrder().groups(ds)
    assert len(groups) == 53
    assert all(g.size == 4 for g in groups)
    # Symbol 3 missing at every other timestamp: complete sections only there.
    keep = (ds.sample_symbol != 3) | (ds.sample_ts // SEC % 2 == 1)
    partial = cast(
        WindowDataset,
        FakeIndex(ds.sample_ts[keep], ds.sample_symbol[keep], ds.sample_chunk[keep]),
    )
    assert len(CrossSectionalOrder().groups(partial)) == 27  # odd seconds in 7..59
    loose = CrossSectionalOrder(require_all=False).groups(partial)
    assert sorted({g.size for g in loose}) == [3, 4]
    assert len(loose) == 53
    with pytest.raises(ConfigError, match="clock_ns"):
        CrossSectionalOrder(clock_ns=0)
    with pytest.raises(ConfigError, match="block_chunks"):
        BlockShuffleOrder(block_chunks=0)


def test_shuffle_quality_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """The trade-off documented in docs/loader.md, measured on a D1-shaped index.

    16 symbols x 50,000 rows, windows of 128, chunks of 4,096 rows, batches of 256.
    """
    ds = fake_dataset(symbols=16, rows=50_000, window=128, chunk_rows=4096)
    orders: dict[str, Any] = {
        "uniform": UniformOrder(0),
        "block x4": BlockShuffleOrder(0, block_chunks=4),
        "block x16": BlockShuffleOrder(0, block_chunks=16),
        "sequential": SequentialOrder(),
    }
    figures = {
        name: shuffle_quality(ds, o.order(ds, 0), batch_size=256, cache_chunks=32)
        for name, o in orders.items()
    }
    with capsys.disabled():
        print()
        for name, f in figures.items():
            print(f"{name:>10}: " + ", ".join(f"{k} {v:.3f}" for k, v in f.items()))
    uniform, block4, block16, sequential = figures.values()
    assert abs(uniform["ts_lag1_corr"]) < 0.01
    assert sequential["ts_lag1_corr"] > 0.99
    assert uniform["chunk_loads_per_chunk"] > 50
    assert block4["chunk_loads_per_chunk"] < 1.1
    assert block16["chunk_loads_per_chunk"] < 1.1
    assert block4["batch_ts_spread"] < block16["batch_ts_spread"] < uniform["batch_ts_spread"]
    assert sequential["batch_symbols"] < block4["batch_symbols"] < uniform["batch_symbols"]
