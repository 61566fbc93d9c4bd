"""Sample orders: which samples an epoch visits, in what order, fixed by (seed, epoch)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError
from ticktensor.kernels import ThreadPool, random_permutation

if TYPE_CHECKING:
    from .dataset import WindowDataset

__all__ = [
    "BlockShuffleOrder",
    "CrossSectionalOrder",
    "Order",
    "SequentialOrder",
    "UniformOrder",
    "shuffle_quality",
]

Int64s = npt.NDArray[np.int64]


@runtime_checkable
class Order(Protocol):
    """What every order provides: the epoch's sample indices, deterministic in (seed, epoch)."""

    def order(self, dataset: WindowDataset, epoch: int) -> Int64s:
        """Indices into ``dataset`` (a permutation of, or a subset of, ``range(len)``)."""
        ...


def _rng(seed: int, epoch: int) -> np.random.Generator:
    if seed < 0 or epoch < 0:
        raise ConfigError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}")
    return np.random.default_rng([int(seed), int(epoch)])


@dataclass(frozen=True)
class UniformOrder:
    """A uniformly random permutation per epoch, determined by ``(seed, epoch)``.

    The best statistical shuffle and the worst for I/O: every sample may touch another
    chunk. Use it when sources are in RAM (a :class:`WindowDataset` always is).
    """

    seed: int = 0

    def order(self, dataset: WindowDataset, epoch: int) -> Int64s:
        # The native scatter shuffle: ~3x numpy's permutation on D1's 16 M samples, which
        # is most of the time to a loader's first batch.
        if self.seed < 0 or epoch < 0:
            raise ConfigError(f"seed and epoch must be >= 0, got seed={self.seed}, epoch={epoch}")
        pool = getattr(dataset, "pool", None) or ThreadPool(1)
        return random_permutation(len(dataset), self.seed, epoch, pool=pool)


@dataclass(frozen=True)
class SequentialOrder:
    """Samples in index order (source by source, time ascending): evaluation and debugging."""

    def order(self, dataset: WindowDataset, epoch: int) -> Int64s:
        return np.arange(len(dataset), dtype=np.int64)


@dataclass(frozen=True)
class BlockShuffleOrder:
    """Chunk-aware shuffle: shuffle storage chunks, cut them into blocks, shuffle inside blocks.

    Samples are grouped by :attr:`WindowDataset.sample_chunk` (the chunk of the window's
    first row); the chunks are permuted, cut into blocks of ``block_chunks`` chunks, and
    the samples of each block are permuted. The epoch visits the blocks one after the
    other, so a reader holding ``block_chunks + 1`` chunks (the extra one for windows
    that run into the next chunk) decodes each chunk about once per epoch. Larger blocks
    mix better and need a bigger cache; ``docs/loader.md`` has measured figures.
    """

    seed: int = 0
    block_chunks: int = 4

    def __post_init__(self) -> None:
        if self.block_chunks < 1:
            raise ConfigError(f"block_chunks must be >= 1, got {self.block_chunks}")

    def order(self, dataset: WindowDataset, epoch: int) -> Int64s:
        rng = _rng(self.seed, epoch)
        chunk = np.asarray(dataset.sample_chunk)
        n = chunk.shape[0]
        # A dataset's samples are in chunk order already; a subset may not be.
        by_chunk = None if np.all(chunk[1:] >= chunk[:-1]) else np.argsort(chunk, kind="stable")
        grouped = chunk if by_chunk is None else chunk[by_chunk]
        cuts = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1
        starts = np.concatenate([[0], cuts]).astype(np.int64)
        ends = np.concatenate([cuts, [n]]).astype(np.int64)
        visit = rng.permutation(starts.shape[0])
        out = np.empty(n, dtype=np.int64)
        filled = 0
        for b in range(0, visit.shape[0], self.block_chunks):
            members = visit[b : b + self.block_chunks]
            block = np.concatenate([np.arange(starts[c], ends[c]) for c in members])
            rng.shuffle(block)
            out[filled : filled + block.shape[0]] = block
            filled += block.shape[0]
        return out if by_chunk is None else by_chunk[out]


@dataclass(frozen=True)
class CrossSectionalOrder:
    """Groups of samples sharing one timestamp across symbols, the groups in random order.

    Timestamps are aligned either exactly (``clock_ns=None``: samples whose window ends at
    the very same ns) or on a bar clock (``clock_ns=c``: bars ``[k*c, (k+1)*c)`` in ns
    since the epoch; per symbol and bar the sample ending *latest* in the bar represents
    it, so nothing after the bar's end is used). With ``require_all=True`` (default) only
    groups where every symbol of the dataset is present are kept. Within a group samples
    are in symbol order. Use a batch size that is a multiple of the group size
    (:meth:`group_size`) so batches hold whole cross sections.
    """

    seed: int = 0
    clock_ns: int | None = None
    require_all: bool = True

    def __post_init__(self) -> None:
        if self.clock_ns is not None and self.clock_ns < 1:
            raise ConfigError(f"clock_ns must be >= 1 or None, got {self.clock_ns}")

    def group_size(self, dataset: WindowDataset) -> int:
        """Symbols present in ``dataset``: the size of a complete cross section."""
        return int(np.unique(dataset.sample_symbol).shape[0])

    def _grouped(self, dataset: WindowDataset) -> tuple[Int64s, Int64s]:
        """Selected samples sorted by (time key, symbol), and each group's first position."""
        ts = dataset.sample_ts
        key = ts if self.clock_ns is None else ts // self.clock_ns
        symbol = dataset.sample_symbol
        by = np.lexsort((np.arange(ts.shape[0]), ts, symbol, key))
        k, s = key[by], symbol[by]
        # Per (key, symbol) keep the last sample: the latest state at or within that time.
        last = np.ones(by.shape[0], dtype=bool)
        last[:-1] = (k[1:] != k[:-1]) | (s[1:] != s[:-1])
        chosen = by[last]
        kc = key[chosen]
        first = np.ones(chosen.shape[0], dtype=bool)
        first[1:] = kc[1:] != kc[:-1]
        starts = np.flatnonzero(first)
        if self.require_all and chosen.size:
            sizes = np.diff(np.append(starts, chosen.shape[0]))
            complete = sizes == self.group_size(dataset)
            chosen = chosen[np.repeat(complete, sizes)]
            sizes = sizes[complete]
            starts = np.cumsum(sizes) - sizes
        return chosen.astype(np.int64), starts.astype(np.int64)

    def groups(self, dataset: WindowDataset) -> list[Int64s]:
        """The cross sections in time order, each an array of sample indices."""
        chosen, starts = self._grouped(dataset)
        return [a for a in np.split(chosen, starts[1:]) if a.size]

    def order(self, dataset: WindowDataset, epoch: int) -> Int64s:
        chosen, starts = self._grouped(dataset)
        if chosen.size == 0:
            return chosen
        sizes = np.diff(np.append(starts, chosen.shape[0]))
        rank = np.empty(starts.shape[0], dtype=np.int64)
        rank[_rng(self.seed, epoch).permutation(starts.shape[0])] = np.arange(starts.shape[0])
        group_of = np.repeat(rank, sizes)
        return chosen[np.argsort(group_of, kind="stable")]


def shuffle_quality(
    dataset: WindowDataset, order: Int64s, *, batch_size: int, cache_chunks: int = 8
) -> dict[str, float]:
    """Measure how well ``order`` mixes samples and what it costs in chunk reads.

    A diagnostic for choosing an order (``docs/loader.md`` has measured figures), not
    part of the loading path.

    Returns
    -------
    dict
        ``ts_lag1_corr``: correlation of consecutive samples' last timestamps (0 is ideal).
        ``same_symbol_adjacent``: share of consecutive pairs from one symbol (a uniform
        shuffle gives about ``sum(p_symbol ** 2)``).
        ``batch_ts_spread``: mean over full batches of the std of the batch's timestamps,
        over the std of all timestamps (about 1 for a uniform shuffle, 0 in time order).
        ``batch_symbols``: mean distinct symbols per full batch.
        ``batch_chunks``: mean distinct chunks (of windows' first rows) per full batch.
        ``chunk_loads_per_chunk``: loads of the chunk holding each window's first row,
        per distinct chunk, for a reader with an LRU cache of ``cache_chunks`` chunks (1 is
        ideal: every chunk decoded once per epoch). Windows that run into the next chunk,
        a share of about ``(window - 1) / chunk_rows``, need one more chunk each.
    """
    idx = np.asarray(order, dtype=np.int64)
    full = idx.size // batch_size
    if idx.size < 3 or full < 1:
        raise ConfigError(f"shuffle_quality needs >= 3 samples and a full batch, got {idx.size}")
    ts = dataset.sample_ts[idx].astype(np.float64)
    symbol = dataset.sample_symbol[idx]
    chunk = dataset.sample_chunk[idx]
    batches = slice(0, full * batch_size)
    cache: OrderedDict[int, None] = OrderedDict()
    loads = 0
    for c in chunk.tolist():
        if c in cache:
            cache.move_to_end(c)
        else:
            loads += 1
            cache[c] = None
            if len(cache) > cache_chunks:
                cache.popitem(last=False)
    return {
        "ts_lag1_corr": float(np.corrcoef(ts[:-1], ts[1:])[0, 1]),
        "same_symbol_adjacent": float(np.mean(symbol[1:] == symbol[:-1])),
        "batch_ts_spread": float(ts[batches].reshape(full, -1).std(axis=1).mean() / ts.std()),
        "batch_symbols": _distinct_per_row(symbol[batches].reshape(full, -1)),
        "batch_chunks": _distinct_per_row(chunk[batches].reshape(full, -1)),
        "chunk_loads_per_chunk": loads / np.unique(chunk).size,
    }


def _distinct_per_row(rows: npt.NDArray[np.integer]) -> float:
    ordered = np.sort(rows, axis=1)
    return float(((np.diff(ordered, axis=1) != 0).sum(axis=1) + 1).mean())
