"""The reader runtime of a window dataset: what reads its chunks, apart from what it holds.

A :class:`~ticktensor.loaders.WindowDataset` is data: which windows exist, their labels,
the chunks they read (picklable, shared by its subsets). Reading them takes a runtime:
the chunk loader (the store's reader behind it), the cache of loaded chunks with its
loading threads, the native gather and its thread pool. :class:`ReaderRuntime` owns
those and their lifecycle: made when a dataset is built or unpickled, made again in a
forked child (the parent's threads are gone there), let go at interpreter exit. Subsets
of one dataset share one runtime, also across a fork.
"""

from __future__ import annotations

import atexit
import copy
import os
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from ticktensor.kernels import ChunkGather, ThreadPool
from ticktensor.store import ChunkReader

from ._cache import ChunkCache
from ._chunks import ChunkIndex, ChunkLoader, Floats

__all__ = ["ReaderRuntime"]

Bools = npt.NDArray[np.bool_]

_LIVE: weakref.WeakSet[ReaderRuntime] = weakref.WeakSet()  # made again in a forked child
_ABANDONED: list[object] = []  # a forked child's copies of its parent's threads, never joined


class ReaderRuntime:
    """The loader, cache, gather and thread pool that read one dataset's chunks.

    Parameters
    ----------
    chunks
        The dataset's chunks.
    loader
        Loads one stored chunk (feature subset and normalization applied).
    n_features
        Features per row of a loaded chunk.
    budget
        Bytes of loaded chunks the cache keeps at most.
    threads
        Loading threads of the cache.
    needed
        Which loads some sample reads.
    label_reader
        The store's reader of whole arrays (labels, timestamps) for the dataset.
    pool
        The gather's thread pool (default: one thread per core).
    """

    def __init__(
        self,
        chunks: ChunkIndex,
        loader: ChunkLoader,
        n_features: int,
        budget: int,
        threads: int,
        needed: Bools,
        label_reader: ChunkReader,
        pool: ThreadPool | None = None,
    ) -> None:
        self.chunks = chunks
        self.loader = loader
        self.n_features = int(n_features)
        self.budget = int(budget)
        self.threads = int(threads)
        self.needed = needed
        self.label_reader = label_reader
        self.pool = pool if pool is not None else ThreadPool(os.cpu_count() or 1)
        self._start()
        _LIVE.add(self)

    def _start(self) -> None:
        """The native gather over the chunks and the cache that loads them."""
        chunks = self.chunks
        self.gather = ChunkGather(
            chunks.chunk_starts, chunks.source_rows, self.n_features, self.pool
        )
        self.cache = ChunkCache(
            chunks, self.loader, self.gather, self.budget, self.threads, self.needed
        )

    def load_chunk(self, chunk: int) -> Floats:
        """Chunk ``chunk`` loaded outside the cache, from its first row on."""
        chunks = self.chunks
        values, _ = self.loader.load(chunks.loads[int(chunks.load_of[chunk])])
        skip = int(chunks.skips[chunk])
        return values[skip:] if skip else values

    def stats(self) -> dict[str, Any]:
        """The cache's counters, its budget and use."""
        cache = self.cache
        return cache.stats.to_dict() | {
            "budget_bytes": cache.budget,
            "used_bytes": cache.used_bytes,
            "loaded_chunks": cache.loaded_count,
            "chunks": len(self.chunks),
            "threads": self.threads,
        }

    def close(self) -> None:
        """Drop every loaded chunk and stop the loading threads (a later read restarts them)."""
        self.cache.close()
        self._start()

    # -- pickling (DataLoader workers under spawn) and fork: the engine is made again ----

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["pool"] = self.pool.size
        for name in ("gather", "cache"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.pool = ThreadPool(int(state["pool"]))
        self._start()
        _LIVE.add(self)

    def after_fork(self) -> None:
        """In a forked child: the parent's threads are gone, so start a fresh engine.

        The chunk loader is copied without what its reader opened (zarr arrays and
        filesystem clients of the parent); the store location makes its own here.
        """
        self.cache.abandon()
        _ABANDONED.extend((self.cache, self.gather, self.pool))
        self.pool = ThreadPool(self.pool.size)
        self.loader = copy.copy(self.loader)
        self.label_reader = copy.copy(self.label_reader)
        self._start()

    def release(self) -> None:
        """At interpreter exit: let go of the native engine (the runtime is unusable after).

        A dataset can outlive every module at exit (a DataLoader worker's dataset stays
        referenced by torch's worker info and by the worker process object), and native
        objects still alive when the extension module is torn down are reported as leaks.
        The cache's loading threads are shut down by its own exit finalizer.
        """
        for name in ("cache", "gather", "pool"):
            self.__dict__.pop(name, None)


def _after_fork_in_child() -> None:
    for runtime in list(_LIVE):
        runtime.after_fork()


def _release_at_exit() -> None:
    # Native destructors skip joining threads a forked child never had, so the abandoned
    # engines can go too.
    _ABANDONED.clear()
    for runtime in list(_LIVE):
        runtime.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_release_at_exit)
