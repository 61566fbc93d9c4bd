"""The chunk cache: loaded chunks within a byte budget, loaded ahead, evicted by next use."""

from __future__ import annotations

import mmap
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ticktensor.kernels import ChunkGather

from ._chunks import ChunkIndex, ChunkLoader, Floats, LoadTimes

__all__ = ["CacheStats", "ChunkCache"]

Int64s = npt.NDArray[np.int64]

_ABSENT: Final = 0
_LOADING: Final = 1
_LOADED: Final = 2
_NEVER: Final = np.iinfo(np.int64).max  # next use of a chunk no planned batch reads
_CHUNK_THREAD: Final = "ticktensor-chunk"
_RELEASE_WAIT_S: Final = 1.0  # longest wait of a pass's end for another user of the cache


@dataclass
class CacheStats:
    """Counters of a cache since it was built (or last reset)."""

    hits: int = 0  # a batch found the chunk loaded
    misses: int = 0  # a batch had to wait for the chunk's load
    loads: int = 0
    evictions: int = 0
    recycled: int = 0  # loads that decoded into an evicted chunk's buffer
    bytes_read: int = 0  # stored bytes read (compressed size for compressed chunks)
    fetch_s: float = 0.0  # summed over loading threads
    decode_s: float = 0.0
    prepare_s: float = 0.0
    wait_s: float = 0.0  # the batch assembler waiting for loads
    over_budget: int = 0  # batches that needed more chunks than the budget holds
    peak_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        figures = asdict(self)
        asked = self.hits + self.misses
        figures["hit_rate"] = self.hits / asked if asked else 0.0
        return figures


class ChunkCache:
    """Keeps chunks loaded in a :class:`ChunkGather` within a byte budget.

    Loads run on ``threads`` background threads (they release the GIL while reading and
    decoding). :meth:`plan` is given the chunks of the next batches, in order: it starts
    their loads as far as the budget allows and, when it must make room, evicts the
    loaded chunk whose next use is farthest away (chunks no planned batch reads go
    first, oldest first) - the optimal policy when the future is known, which it is
    since orders are deterministic. :meth:`require` makes sure one batch's chunks are
    loaded, going over the budget rather than failing when a single batch needs more.

    Hold :attr:`lock` around :meth:`require` and the gather that follows it, so that no
    other thread evicts a chunk in between.

    Callers name the dataset's chunks (:class:`ChunkIndex` numbering); the cache loads
    their stored chunks (:attr:`ChunkIndex.loads`), each once, and publishes every chunk
    that is a piece of one (a symbol's rows of a pack's chunk) when it is loaded. Counts,
    bytes and eviction are per stored chunk.

    Parameters
    ----------
    index
        The chunks and where they are stored.
    loader
        Loads one chunk.
    gather
        The native gather the loaded chunks are published to.
    budget
        Bytes of loaded chunks to keep at most.
    threads
        Loading threads.
    needed
        Which loads some sample reads (default: all); the cache is :attr:`complete` once
        these are loaded (a pack's chunks holding only other symbols' rows never are).
    """

    def __init__(
        self,
        index: ChunkIndex,
        loader: ChunkLoader,
        gather: ChunkGather,
        budget: int,
        threads: int,
        needed: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        if budget < 1 or threads < 1:
            raise ValueError(f"budget and threads must be >= 1, got {budget} and {threads}")
        self.index = index
        self.budget = int(budget)
        self.threads = int(threads)
        self.lock = threading.RLock()
        self.stats = CacheStats()
        self._loader = loader
        self._gather = gather
        self._state = np.zeros(len(index.loads), dtype=np.int8)
        self._nbytes = np.asarray([loader.nbytes(f) for f in index.loads], dtype=np.int64)
        self._loaded: dict[int, Floats] = {}  # insertion order = load order
        self._needed = np.ones(len(index.loads), np.bool_) if needed is None else needed
        self._wanting = int(np.count_nonzero(self._needed))  # needed loads not loaded
        self._spares: list[Floats] = []  # buffers of evicted chunks, decoded into again
        self._loading: dict[int, Future[tuple[Floats, LoadTimes]]] = {}
        self._used = 0  # bytes loaded or being loaded
        self._executor: ThreadPoolExecutor | None = None  # started by the first load
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # -- sizes ---------------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        """Bytes of chunks loaded or being loaded."""
        return self._used

    @property
    def loaded_count(self) -> int:
        """Stored chunks loaded now."""
        return len(self._loaded)

    @property
    def complete(self) -> bool:
        """Whether every chunk a sample reads is loaded (then nothing needs planning or
        loading)."""
        return self._wanting == 0

    def nbytes(self, chunk: int) -> int:
        """Bytes chunk ``chunk``'s stored chunk takes once loaded."""
        return int(self._nbytes[self.index.load_of[chunk]])

    # -- loading -------------------------------------------------------------------------

    def require(self, chunks: Int64s, upcoming: Sequence[Int64s] = ()) -> None:
        """Return once every chunk in ``chunks`` is loaded.

        ``upcoming`` are the chunks of the batches after this one, in order: eviction
        keeps the ones needed soonest.
        """
        with self.lock:
            loads = self.index.loads_of(chunks)
            if self.complete:
                self.stats.hits += int(loads.size)
                return
            self._collect()
            state = self._state[loads]
            self.stats.hits += int(np.count_nonzero(state == _LOADED))
            missing = loads[state != _LOADED]
            if missing.size == 0:
                return
            self.stats.misses += int(missing.size)
            absent = missing[self._state[missing] == _ABSENT]
            need = int(self._nbytes[absent].sum())
            if self._used + need > self.budget:
                ahead = [self.index.loads_of(c) for c in upcoming]
                self._evict(need, protect=loads, upcoming=ahead, before=-1)
                if self._used + need > self.budget:
                    self.stats.over_budget += 1
            for chunk in absent.tolist():
                self._start(chunk)
            started = time.perf_counter()
            try:
                for chunk in missing.tolist():
                    self._finish(chunk)
            finally:
                self.stats.wait_s += time.perf_counter() - started

    def plan(self, upcoming: Sequence[Int64s]) -> None:
        """Start loading the chunks of the next batches, in order, within the budget."""
        with self.lock:
            if self.complete:
                return
            self._collect()
            ahead = [self.index.loads_of(c) for c in upcoming]
            for position, loads in enumerate(ahead):
                absent = loads[self._state[loads] == _ABSENT]
                if absent.size == 0:
                    continue
                need = int(self._nbytes[absent].sum())
                if self._used + need > self.budget:
                    self._evict(need, protect=loads, upcoming=ahead, before=position)
                    if self._used + need > self.budget:
                        return  # the rest waits until batches before it are done
                for chunk in absent.tolist():
                    self._start(chunk)

    def advise(self, chunks: Int64s) -> None:
        """These chunks will be needed a little later: a local store's kernel starts
        reading them (no memory used), an object store's requests go out."""
        loads = self.index.loads_of(chunks)
        for load in loads[self._state[loads] == _ABSENT].tolist():
            self._loader.advise(self.index.loads[load])

    def drop_all(self) -> None:
        """Evict every loaded chunk (loads in flight finish and are then dropped)."""
        with self.lock:
            for load in list(self._loading):
                self._finish(load, raise_errors=False)
            for load in list(self._loaded):
                self._drop(load)
            self._spares.clear()

    def stop_threads(self) -> None:
        """Join the loading threads; loads not started are cancelled, loaded chunks stay.

        The next load starts new threads. :class:`~ticktensor.DataLoader` calls this at
        the end of each pass, so no thread outlives the pass.
        """
        with self.lock:
            if self._executor is None or self._finalizer is None:
                return
            self._finalizer()  # shutdown(wait=True, cancel_futures=True)
            self._executor = self._finalizer = None
            self._loader.stop_fetching()
            for load, future in list(self._loading.items()):
                if future.cancelled():
                    del self._loading[load]
                    self._state[load] = _ABSENT
                    self._used -= int(self._nbytes[load])
            self._collect()

    def release_threads(self) -> None:
        """:meth:`stop_threads`, unless another thread holds the cache for longer than
        :data:`_RELEASE_WAIT_S` (then the threads stay, idle, until the next pass ends or
        the cache closes).

        Safe from a finalizer: the cyclic collector runs a dropped pass's finalizer on
        whichever thread allocates, also on a chunk thread that a thread holding the cache
        is starting or joining, which would then wait for each other for ever.
        """
        if not self.lock.acquire(timeout=_RELEASE_WAIT_S):
            return
        try:
            self.stop_threads()
        finally:
            self.lock.release()

    def close(self) -> None:
        """Stop the loading threads and drop every chunk."""
        with self.lock:
            self.stop_threads()
            self.drop_all()

    # -- internals -----------------------------------------------------------------------

    def _start(self, load: int) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix=_CHUNK_THREAD)
            self._finalizer = weakref.finalize(self, _shut_down, self._executor)
        file = self.index.loads[load]
        self._loader.fetch_ahead(file)  # an object store's request goes out now
        spare = self._spare(file.nbytes)
        self._loading[load] = self._executor.submit(self._loader.load, file, spare)
        self._state[load] = _LOADING
        self._used += int(self._nbytes[load])
        self.stats.peak_bytes = max(self.stats.peak_bytes, self._used)

    def _collect(self) -> None:
        """Publish the loads that have finished; a failed load gives its bytes back and its
        error waits for the batch that needs the chunk (which then loads it again)."""
        for load, future in list(self._loading.items()):
            if not future.done():
                continue
            if future.exception() is None:
                self._finish(load)
            else:
                del self._loading[load]
                self._state[load] = _ABSENT
                self._used -= int(self._nbytes[load])

    def _finish(self, load: int, *, raise_errors: bool = True) -> None:
        future = self._loading.pop(load)
        try:
            values, times = future.result()
        except BaseException as exc:
            self._state[load] = _ABSENT
            self._used -= int(self._nbytes[load])
            if not raise_errors:
                return
            file = self.index.loads[load]
            exc.add_note(f"while loading chunk {file.index} of {file.owner} ({file.rel})")
            raise
        for piece in self.index.pieces(load):
            skip = int(self.index.skips[piece])
            self._gather.set(piece, values[skip:] if skip else values)
        self._state[load] = _LOADED
        self._loaded[load] = values
        self._wanting -= int(self._needed[load])
        stats = self.stats
        stats.loads += 1
        stats.bytes_read += times.bytes_read
        stats.fetch_s += times.fetch_s
        stats.decode_s += times.decode_s
        stats.prepare_s += times.prepare_s

    def _drop(self, load: int) -> None:
        for piece in self.index.pieces(load):
            self._gather.clear(piece)
        values = self._loaded.pop(load)
        self._wanting += int(self._needed[load])
        # A decoded buffer nobody else holds is decoded into again: fresh memory would cost
        # a page fault per 4 KiB. Foreign arrays are let go.
        if (
            len(self._spares) < self.threads + 1
            and _private(values)
            and values.flags.writeable  # not a read-only array of zarr-python's
            and values.nbytes == self.index.loads[load].nbytes
            and sys.getrefcount(values) <= 2  # this name and the call's argument
        ):
            self._spares.append(values)
        self._state[load] = _ABSENT
        self._used -= int(self._nbytes[load])
        self.stats.evictions += 1

    def _spare(self, nbytes: int) -> Floats | None:
        """A recycled buffer of ``nbytes`` bytes, if one is kept."""
        for i, spare in enumerate(self._spares):
            if spare.nbytes == nbytes:
                self.stats.recycled += 1
                return self._spares.pop(i)
        return None

    def _evict(
        self, need: int, *, protect: Int64s, upcoming: Sequence[Int64s], before: int
    ) -> None:
        """Free ``need`` bytes, never evicting the loads ``protect`` or those read by batches
        up to ``upcoming[before]``; the load used farthest in the future goes first."""
        next_use: dict[int, int] = {}
        for position, loads in enumerate(upcoming):
            for load in loads.tolist():
                next_use.setdefault(load, position)
        kept = set(protect.tolist())
        candidates = [
            (next_use.get(load, _NEVER), -order, load)
            for order, load in enumerate(self._loaded)
            if load not in kept and next_use.get(load, _NEVER) > before
        ]
        candidates.sort(reverse=True)  # farthest next use first; then the oldest load
        for _, _, load in candidates:
            if self._used + need <= self.budget:
                return
            self._drop(load)

    def abandon(self) -> None:
        """Forget the loading threads without joining them (in a forked child, where they
        do not exist); the cache must not be used afterwards."""
        if self._finalizer is not None:
            self._finalizer.detach()


def _shut_down(executor: ThreadPoolExecutor) -> None:
    """Cancel the loads not started and wait for the others; safe from a finalizer, which the
    cyclic collector may run on a chunk thread, one that cannot wait for itself."""
    on_chunk_thread = threading.current_thread().name.startswith(_CHUNK_THREAD)
    executor.shutdown(wait=not on_chunk_thread, cancel_futures=True)


def _private(values: Floats) -> bool:
    """Whether ``values`` owns its memory: numpy's own, or an anonymous mapping of ours."""
    base: object = values.base
    return base is None or isinstance(base, mmap.mmap)
