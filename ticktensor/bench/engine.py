"""How the bench drives ticktensor's loader through its public API, whatever the engine."""

from __future__ import annotations

import gc
import inspect
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ticktensor.kernels import ThreadPool
from ticktensor.loaders import (
    BlockShuffleOrder,
    DataLoader,
    FastOptions,
    Order,
    UniformOrder,
    WindowDataset,
)
from ticktensor.store import StoreVersion

from .measure import Rep, RssMonitor, endless, timed

__all__ = [
    "KNOWN_STATS",
    "cache_budget_bytes",
    "cache_hit_rate",
    "flatten",
    "fresh_pass",
    "get_batch_loop",
    "new_stats",
    "open_dataset",
    "order_of",
    "ticktensor_loader",
    "ticktensor_wrapped",
]

KNOWN_STATS = frozenset(
    {
        "batches",
        "samples",
        "bytes",
        "wait_s",
        "assemble_s",
        "queue_depth",
        "mean_queue_depth",
        "first_batch_s",
        "wall_s",
        "stall_fraction",
        "buffers_allocated",
        "epoch",
        "samples_consumed",
    }
)
"""``DataLoader.stats()`` keys the bench already reports; any others are printed as they come."""


def _accepts(function: Callable[..., Any], name: str) -> bool:
    return name in inspect.signature(function).parameters


def open_dataset(
    version: StoreVersion,
    window: int,
    threads: int,
    *,
    stride: int = 1,
    verify: bool | Literal["none"] = False,
) -> WindowDataset:
    """A :class:`WindowDataset` using ``threads`` threads to load chunks (where the engine
    has ``threads=``) and to gather windows; ``verify`` as :class:`WindowDataset` takes it."""
    loading: dict[str, Any] = {"threads": threads} if _accepts(WindowDataset, "threads") else {}
    if verify is not False:
        loading["verify"] = verify
    return WindowDataset(version, window, stride=stride, pool=ThreadPool(threads), **loading)


def order_of(kind: str, seed: int) -> Order:
    """``uniform`` or ``block`` (:class:`BlockShuffleOrder` with its default block)."""
    return UniformOrder(seed) if kind == "uniform" else BlockShuffleOrder(seed)


def _loader(
    ds: WindowDataset, batch: int, order: Order, threads: int, device: str | None = None
) -> DataLoader:
    pinned = device is not None
    return DataLoader(
        ds,
        batch_size=batch,
        drop_last=False,
        pin_memory=pinned,
        fast=FastOptions(order=order, device=device),
    )


def ticktensor_loader(
    ds: WindowDataset,
    batch: int,
    kind: str,
    seed: int,
    seconds: float,
    threads: int,
    *,
    device: str | None = None,
) -> Callable[[int], Rep]:
    """``ticktensor.DataLoader`` over ``ds`` in ``kind`` order, a fresh loader per repetition.

    With ``device`` the batches are copied there (pinned buffers); the loader reuses a
    buffer only after its copy has finished, so the rate includes the copies.
    """

    def batches(rep: int) -> tuple[Iterator[int], Callable[[], Mapping[str, Any]]]:
        loader = _loader(ds, batch, order_of(kind, seed + rep), threads, device)
        return endless(lambda: loader), loader.stats

    return timed(batches, seconds)


def ticktensor_wrapped(
    ds: WindowDataset, batch: int, wrapper: str, seed: int, seconds: float
) -> Callable[[int], Rep]:
    """``ticktensor.DataLoader`` over ``ds`` as users wrap it, a fresh loader per repetition:
    ``"subset"`` is 90% of it from ``torch.utils.data.random_split`` (shuffled), and
    ``"distributed"`` is rank 0 of 2 of a shuffled ``DistributedSampler``. Both stay on the
    fast path (the loader warns otherwise, and the bench fails on warnings it did not expect).
    """
    import torch
    from torch.utils.data import DistributedSampler, random_split

    def batches(rep: int) -> tuple[Iterator[int], Callable[[], Mapping[str, Any]]]:
        if wrapper == "subset":
            split = torch.Generator().manual_seed(seed + rep)
            part, _ = random_split(ds, [0.9, 0.1], generator=split)
            loader = DataLoader(part, batch_size=batch, shuffle=True, fast=FastOptions(seed=seed))
        else:
            sampler: DistributedSampler[Any] = DistributedSampler(
                ds, num_replicas=2, rank=0, shuffle=True, seed=seed + rep
            )
            loader = DataLoader(ds, batch_size=batch, sampler=sampler)
        if not loader.fast:
            raise RuntimeError(f"the {wrapper} loader left the fast path")
        return endless(lambda: loader), loader.stats

    return timed(batches, seconds)


def get_batch_loop(
    ds: WindowDataset, batch: int, order: npt.NDArray[np.int64], seconds: float
) -> Callable[[int], Rep]:
    """``WindowDataset.get_batch`` in a bare loop on this thread: the loader without a loader."""
    x = np.empty((batch, ds.window, ds.n_features), dtype=np.float32)
    y = np.empty((batch, ds.n_labels), dtype=np.float32)

    def batches(rep: int) -> tuple[Iterator[int], Callable[[], Mapping[str, Any]]]:
        def forever() -> Iterator[int]:
            while True:
                for first in range(0, order.shape[0] - batch + 1, batch):
                    ds.get_batch(order[first : first + batch], out=x, labels_out=y)
                    yield batch

        return forever(), dict

    return timed(batches, seconds)


def fresh_pass(
    version: StoreVersion,
    window: int,
    batch: int,
    threads: int,
    seed: int,
    *,
    kind: str = "block",
    verify: bool | Literal["none"] = False,
) -> Rep:
    """One epoch over non-overlapping windows (stride = window), timed from opening the dataset
    (with ``verify`` as :class:`WindowDataset` takes it).

    Every delivered byte is a stored byte read (and decoded) once, so the rate compares
    directly with a decode rate or a sequential read, whichever engine does the reading:
    one that reads the series at open, or one that reads chunks as batches need them.
    """
    with RssMonitor() as rss:
        started = time.perf_counter()
        ds = open_dataset(version, window, threads, stride=window, verify=verify)
        loader = _loader(ds, batch, order_of(kind, seed), threads)
        first: float | None = None
        samples = 0
        for x, _ in loader:
            if first is None:
                first = time.perf_counter() - started
            samples += int(x.shape[0])
        seconds = time.perf_counter() - started
        stats = dict(loader.stats())
    # A loader and its samplers refer to each other: without a collection here the
    # dataset and its loaded chunks outlive the pass until the cyclic collector runs, and
    # passes pile up memory that evicts the page cache the next rows read.
    del ds, loader
    gc.collect()
    return Rep(samples, seconds, first, stats, rss.peak, rss.before)


def flatten(stats: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested ``stats()`` sections as dotted keys: ``{"cache": {"hits": 3}}`` -> ``cache.hits``.

    Examples
    --------
    >>> flatten({"batches": 2, "cache": {"hits": 3, "misses": 1}})
    {'batches': 2, 'cache.hits': 3, 'cache.misses': 1}
    """
    flat: dict[str, Any] = {}
    for key, value in stats.items():
        if isinstance(value, Mapping):
            flat |= flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def new_stats(stats: Mapping[str, Any]) -> dict[str, Any]:
    """The (flattened) keys of a ``stats()`` that the bench does not know yet (a newer engine's)."""
    return {k: v for k, v in flatten(stats).items() if k not in KNOWN_STATS}


def _number(stats: Mapping[str, Any], suffix: str) -> float | None:
    for key, value in flatten(stats).items():
        if (
            key.split(".")[-1] == suffix
            and isinstance(value, int | float)
            and not isinstance(value, bool)
        ):
            return float(value)
    return None


def cache_hit_rate(stats: Mapping[str, Any]) -> float | None:
    """Chunk cache hit rate, when ``stats()`` reports one or counts hits and misses.

    Examples
    --------
    >>> cache_hit_rate({"cache": {"hits": 3, "misses": 1}}), cache_hit_rate({"batches": 1})
    (0.75, None)
    """
    for name in ("cache_hit_rate", "hit_rate"):
        rate = _number(stats, name)
        if rate is not None:
            return rate
    hits, misses = _number(stats, "hits"), _number(stats, "misses")
    if hits is None or misses is None or hits + misses == 0:
        return None
    return hits / (hits + misses)


def cache_budget_bytes(stats: Mapping[str, Any]) -> float | None:
    """The chunk cache's byte budget, when ``stats()`` reports one."""
    for name in ("budget_bytes", "cache_bytes", "cache_budget_bytes"):
        found = _number(stats, name)
        if found is not None:
            return found
    return None
