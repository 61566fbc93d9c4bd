"""Soak: many epochs of a small loader run, watching RSS, threads and file descriptors.

Figures come from ``/proc/self`` after every epoch. A leak is a resource that keeps
growing once the run is warm: RSS whose fitted slope would add more than
``rss_budget`` bytes over the run, or threads or open files whose fitted slope adds one
or more over the run and that end above their warm-up maximum. Only the public loader API is used:
``WindowDataset(version, window)`` and ``DataLoader(dataset, batch_size=...)``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ticktensor.store import Layout, Store

__all__ = ["SoakResult", "make_soak_store", "proc_stats", "soak"]


def proc_stats() -> tuple[int, int, int]:
    """(RSS bytes, threads, open file descriptors) of this process, from /proc."""
    rss = threads = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads, len(os.listdir("/proc/self/fd"))


@dataclass
class SoakResult:
    """Per-epoch samples of RSS, threads and fds, their fitted slopes, and any leaks."""

    label: str
    epochs: int
    batches: int = 0
    seconds: float = 0.0
    rss: list[int] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    warmup: int = 5
    leaks: list[str] = field(default_factory=list)

    def slope(self, series: list[int]) -> float:
        """Least-squares growth per epoch after the warm-up."""
        y = np.asarray(series[self.warmup :], dtype=np.float64)
        if len(y) < 2:
            return 0.0
        return float(np.polyfit(np.arange(len(y), dtype=np.float64), y, 1)[0])

    @property
    def rss_slope_kib(self) -> float:
        return self.slope(self.rss) / 1024

    @property
    def thread_slope(self) -> float:
        return self.slope(self.threads)

    @property
    def fd_slope(self) -> float:
        return self.slope(self.fds)


def make_soak_store(url: str, codec: str, symbols: int = 4, rows: int = 6000) -> str:
    """A small store of one session of ``symbols`` symbols (8 features, 1 label) in
    ``codec``, as one pack."""
    store = Store.create(url, layout=Layout(codec=codec, chunk_rows=1024), exist_ok=True)  # type: ignore[arg-type]
    if store.latest_version() > 0:
        return url
    rng = np.random.default_rng(0)
    ts = 1_704_186_000 * 10**9 + np.arange(rows, dtype=np.int64) * 10**6
    pack = store.write_pack(
        session="2024-01-02",
        symbols=[f"S{k:04d}" for k in range(symbols)],
        offsets=np.arange(symbols + 1) * rows,
        ts=np.tile(ts, symbols),
        values=rng.standard_normal((symbols * rows, 8)).astype(np.float32),
        feature_names=[f"f{i}" for i in range(8)],
        labels=rng.standard_normal((symbols * rows, 1)).astype(np.float32),
        label_names=["y"],
    )
    store.commit(packs=[pack], message="soak")
    return url


def soak(
    url: str,
    epochs: int,
    *,
    label: str = "loader",
    batch_size: int = 64,
    window: int = 32,
    loader_kwargs: dict[str, Any] | None = None,
    warmup: int = 5,
    rss_budget: int = 32 << 20,
) -> SoakResult:
    """Iterate ``epochs`` epochs of ``DataLoader(WindowDataset(latest, window))``."""
    from ticktensor import DataLoader
    from ticktensor.loaders import WindowDataset

    result = SoakResult(label, epochs, warmup=min(warmup, max(epochs - 2, 0)))
    dataset = WindowDataset(Store.open(url).version(), window)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, **(loader_kwargs or {}))
    t0 = time.perf_counter()
    for epoch in range(epochs):
        set_epoch = getattr(loader, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(epoch)
        for _batch in loader:
            result.batches += 1
        rss, threads, fds = proc_stats()
        result.rss.append(rss)
        result.threads.append(threads)
        result.fds.append(fds)
    result.seconds = time.perf_counter() - t0
    del loader, dataset
    _find_leaks(result, rss_budget)
    return result


def _find_leaks(r: SoakResult, rss_budget: int) -> None:
    warm = r.warmup
    grown = r.slope(r.rss) * max(r.epochs - warm, 1)
    if grown > rss_budget:
        r.leaks.append(f"RSS grows {r.rss_slope_kib:.1f} KiB/epoch ({grown / 2**20:.1f} MiB)")
    if r.epochs > warm:
        # A thread or descriptor that exists at some samples (a prefetch thread between
        # epochs) is not a leak; a count that trends up by one or more over the run is.
        for name, series in (("threads", r.threads), ("file descriptors", r.fds)):
            trend = r.slope(series) * max(r.epochs - warm, 1)
            if trend >= 1 and series[-1] > max(series[: warm + 1]):
                r.leaks.append(
                    f"{name}: {max(series[: warm + 1])} -> {series[-1]} (+{trend:.1f} by trend)"
                )
