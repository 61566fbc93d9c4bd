"""The reader runtime of a window dataset: what reads its chunks, apart from what it holds.

A :class:`~ticktensor.loaders.WindowDataset` is its data, a
:class:`~ticktensor.loaders._window_index.WindowIndex` (which windows exist, their labels,
the chunks they read: picklable, shared by its subsets), and a runtime that reads them:
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
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ticktensor.errors import ConfigError
from ticktensor.kernels import ChunkGather, SamplePrefetcher, ThreadPool

from ._cache import ChunkCache
from ._chunks import ChunkIndex, ChunkLoader, Floats
from ._window_index import WindowIndex

__all__ = ["ReaderRuntime"]

Bools = npt.NDArray[np.bool_]
Int64s = npt.NDArray[np.int64]

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
        pool: ThreadPool | None = None,
    ) -> None:
        self.chunks = chunks
        self.loader = loader
        self.n_features = int(n_features)
        self.budget = int(budget)
        self.threads = int(threads)
        self.needed = needed
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

    def gather_batch(
        self,
        index: WindowIndex,
        indices: Int64s,
        out: Floats | None = None,
        labels_out: Floats | None = None,
        chunks: Int64s | None = None,
        upcoming: Sequence[Int64s] = (),
    ) -> tuple[Floats, Floats]:
        """Gather samples ``indices`` of ``index`` (checked, see
        :meth:`WindowIndex.check_indices`) into ``out`` and ``labels_out``.

        The chunks the windows read are loaded first (or found in the cache): ``chunks``
        are those (computed when ``None``), ``upcoming`` those of the next batches (see
        :meth:`ChunkCache.require`). Windows and labels are then cut in one native call,
        with the GIL released.

        Parameters
        ----------
        index
            The index this runtime reads the chunks of (its :attr:`chunks`).
        indices
            1-D int64 sample indices in ``[0, len(index))``.
        out, labels_out
            C-contiguous float32 arrays ``[B, W, F]`` and ``[B, L]`` to write into (made
            when ``None``).
        chunks, upcoming
            The chunks this batch reads and those of the batches after it.

        Returns
        -------
        tuple of numpy.ndarray
            ``(out, labels_out)``.
        """
        self._check_index(index)
        if labels_out is not None and (
            labels_out.shape != (indices.size, index.n_labels) or labels_out.dtype != np.float32
        ):
            raise ConfigError(
                f"labels_out: expected float32 {(indices.size, index.n_labels)}, got "
                f"{labels_out.dtype}{labels_out.shape}"
            )
        if out is None:
            out = np.empty((indices.size, index.window, self.n_features), dtype=np.float32)
        if labels_out is None:
            labels_out = np.empty((indices.size, index.n_labels), dtype=np.float32)
        cache = self.cache
        with cache.lock:
            if not cache.complete:
                if chunks is None:
                    chunks = index.chunks_of(indices)
                cache.require(chunks, upcoming)
            self.gather.gather_samples(
                indices,
                index.sample_segment,
                index.sample_start,
                index.window,
                index.labels_flat,
                index.label_offset,
                out,
                labels_out,
            )
        return out, labels_out

    def prefetcher(
        self,
        index: WindowIndex,
        order: Int64s,
        steps: tuple[Int64s, Int64s],
        capacity: int,
        depth: int,
    ) -> SamplePrefetcher:
        """A native thread gathering the planned steps of ``index``'s samples (see
        :meth:`ShardPlan.step_ranges`) into slots of ``capacity`` samples, as
        :meth:`gather_batch` would, once every chunk is loaded
        (:attr:`ChunkCache.complete`): nothing is loaded or evicted any more."""
        self._check_index(index)
        return self.gather.prefetcher(
            index.sample_segment,
            index.sample_start,
            index.window,
            index.labels_flat,
            index.label_offset,
            order,
            steps,
            capacity,
            depth,
        )

    def _check_index(self, index: WindowIndex) -> None:
        if index.chunks is not self.chunks:
            raise ValueError(f"{index!r} reads other chunks than this runtime's")

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
