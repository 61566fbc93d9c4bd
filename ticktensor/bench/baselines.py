"""What users write today, on the same windows: torch over mmap and zarr, threads, numpy."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.utils.data
import zarr

from ticktensor.loaders import WindowDataset

from .measure import Rep, endless, timed

__all__ = [
    "MmapGather",
    "MmapWindows",
    "ZarrWindows",
    "numpy_gather",
    "series_of_sources",
    "threadpool_mmap",
    "torch_loader",
]

Floats = npt.NDArray[np.float32]
Sample = tuple[torch.Tensor, torch.Tensor]


def _no_stats() -> Mapping[str, Any]:
    return {}


class MmapWindows(torch.utils.data.Dataset[Sample]):
    """Windows sliced from ``np.load(mmap_mode="r")`` arrays, every ``stride``-th start."""

    def __init__(self, npy_dir: Path, series: int, window: int, stride: int = 1) -> None:
        self.values = [
            np.load(npy_dir / f"values-{s:03d}.npy", mmap_mode="r") for s in range(series)
        ]
        self.labels = [
            np.load(npy_dir / f"labels-{s:03d}.npy", mmap_mode="r") for s in range(series)
        ]
        self.window, self.stride = window, stride
        self.per_series = (int(self.values[0].shape[0]) - window) // stride + 1

    def __len__(self) -> int:
        return len(self.values) * self.per_series

    def __getitem__(self, i: int) -> Sample:
        s, k = divmod(i, self.per_series)
        start = k * self.stride
        x = np.array(self.values[s][start : start + self.window])
        y = np.array(self.labels[s][start + self.window - 1])
        return torch.from_numpy(x), torch.from_numpy(y)


class ZarrWindows(torch.utils.data.Dataset[Sample]):
    """Windows read with zarr-python from a store's segment arrays, every ``stride``-th start.

    Arrays are opened lazily in each process, so forked DataLoader workers open their own.
    """

    def __init__(self, segment_dirs: list[Path], rows: int, window: int, stride: int = 1) -> None:
        self.dirs = [str(d) for d in segment_dirs]
        self.window, self.stride = window, stride
        self.per_series = (rows - window) // stride + 1
        self._opened: tuple[int, list[Any], list[Any]] | None = None

    def _arrays(self) -> tuple[list[Any], list[Any]]:
        if self._opened is None or self._opened[0] != os.getpid():
            values = [zarr.open_array(f"{d}/values", mode="r") for d in self.dirs]
            labels = [zarr.open_array(f"{d}/labels", mode="r") for d in self.dirs]
            self._opened = (os.getpid(), values, labels)
        return self._opened[1], self._opened[2]

    def __len__(self) -> int:
        return len(self.dirs) * self.per_series

    def __getitem__(self, i: int) -> Sample:
        values, labels = self._arrays()
        s, k = divmod(i, self.per_series)
        start = k * self.stride
        x = np.asarray(values[s][start : start + self.window], dtype=np.float32)
        y = np.asarray(labels[s][start + self.window - 1], dtype=np.float32)
        return torch.from_numpy(x), torch.from_numpy(y)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_opened": None}


def torch_loader(
    ds: torch.utils.data.Dataset[Sample], batch: int, workers: int, seed: int, seconds: float
) -> Callable[[int], Rep]:
    """``torch.utils.data.DataLoader(shuffle=True, num_workers=workers)``, timed."""

    def batches(rep: int) -> tuple[Iterator[int], Callable[[], Mapping[str, Any]]]:
        generator = torch.Generator().manual_seed(seed + rep)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=batch, shuffle=True, num_workers=workers, generator=generator
        )
        return endless(lambda: loader), _no_stats

    return timed(batches, seconds)


def series_of_sources(ds: WindowDataset) -> npt.NDArray[np.int64]:
    """For each dataset source, the index of its ``.npy`` series (symbol ``S{n:03d}``).

    The bench workloads are stores of one-symbol segments, each one series."""
    symbols = []
    for run in ds.records:
        symbol = run[0].symbol
        if symbol is None:
            raise TypeError("the numpy baselines read stores of segments, not packs")
        symbols.append(int(symbol[1:]))
    return np.array(symbols, dtype=np.int64)


def numpy_gather(
    ds: WindowDataset, batch: int, order: npt.NDArray[np.int64], seconds: float
) -> Callable[[int], Rep]:
    """A per-window copy loop over the in-RAM series on one thread: the numpy limit."""
    x = np.empty((batch, ds.window, ds.n_features), dtype=np.float32)
    y = np.empty((batch, ds.n_labels), dtype=np.float32)
    sources, labels, window = ds.sources, ds.labels_sources, ds.window

    def one_pass() -> Iterator[int]:
        for first in range(0, order.shape[0], batch):
            idx = order[first : first + batch]
            segments, starts = ds.sample_segment[idx].tolist(), ds.sample_start[idx].tolist()
            for b, (s, start) in enumerate(zip(segments, starts, strict=True)):
                x[b] = sources[s][start : start + window]
                y[b] = labels[s][start + window - 1]
            yield len(segments)

    def batches(rep: int) -> tuple[Iterator[int], Callable[[], Mapping[str, Any]]]:
        def forever() -> Iterator[int]:
            while True:
                yield from one_pass()

        return forever(), _no_stats

    return timed(batches, seconds)


class MmapGather:
    """Fill one batch from mmap arrays: per-window copies or one fancy index per series."""

    def __init__(self, arrays: MmapWindows, window: int, fancy: bool) -> None:
        self.values, self.labels = arrays.values, arrays.labels
        self.window, self.fancy = window, fancy
        self.steps = np.arange(window, dtype=np.int64)

    def __call__(
        self, series: npt.NDArray[np.int64], starts: npt.NDArray[np.int64], x: Floats, y: Floats
    ) -> int:
        w = self.window
        if not self.fancy:
            for b, (s, start) in enumerate(zip(series.tolist(), starts.tolist(), strict=True)):
                x[b] = self.values[s][start : start + w]
                y[b] = self.labels[s][start + w - 1]
            return len(starts)
        for s in np.unique(series).tolist():
            where = np.flatnonzero(series == s)
            first = starts[where]
            x[where] = self.values[s][first[:, None] + self.steps]
            y[where] = self.labels[s][first + w - 1]
        return len(starts)


def threadpool_mmap(
    ds: WindowDataset,
    arrays: MmapWindows,
    batch: int,
    order: npt.NDArray[np.int64],
    seconds: float,
    *,
    threads: int = 2,
    ahead: int = 2,
    fancy: bool = False,
) -> Callable[[int], Rep]:
    """``ThreadPoolExecutor(threads)`` gathering ``order``'s windows from the mmap ``arrays``.

    Preallocated buffers, ``ahead`` batches submitted ahead of the consumer: what a strong
    user writes with threads. ``fancy`` picks one numpy fancy index per series instead of
    a copy per window.
    """
    to_series = series_of_sources(ds)
    gather = MmapGather(arrays, ds.window, fancy)
    slots = ahead + 2  # in flight, the one the consumer holds, and one spare
    xs = [np.empty((batch, ds.window, ds.n_features), dtype=np.float32) for _ in range(slots)]
    ys = [np.empty((batch, ds.n_labels), dtype=np.float32) for _ in range(slots)]
    steps = order.shape[0] // batch

    def batches(rep: int) -> tuple[Iterator[int], Callable[[], Mapping[str, Any]]]:
        def stream() -> Iterator[int]:
            with ThreadPoolExecutor(threads) as pool:
                pending: list[Future[int]] = []
                k = 0
                while True:
                    while len(pending) < ahead:
                        step = k % steps
                        idx = order[step * batch : (step + 1) * batch]
                        slot = k % slots
                        pending.append(
                            pool.submit(
                                gather,
                                to_series[ds.sample_segment[idx]],
                                ds.sample_start[idx],
                                xs[slot],
                                ys[slot],
                            )
                        )
                        k += 1
                    yield pending.pop(0).result()

        return stream(), _no_stats

    return timed(batches, seconds)
