"""Fetching ahead from an object store: many ranged requests in flight, bounded by bytes.

A request to an object store waits tens of milliseconds before its first byte. Read one
chunk at a time per loading thread, a first epoch is bound by that latency, not by the
link. :class:`FetchAhead` takes hints of the chunks a reader will load soon, in order,
and keeps up to ``max_requests`` of them, of ``max_flight`` bytes in all, in flight on
its own I/O threads (not the loading threads, whose count follows the CPUs), with at most
``max_bytes`` of stored bytes requested or fetched and not yet taken. Bytes in flight
share the link: more of them than the link's bandwidth-delay product only makes every
chunk arrive later, so the cap keeps chunks arriving in the order they are needed. A
load then :meth:`take`\\ s its bytes (waiting for a request in flight), or reads them
itself when they were never hinted.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Final

from ._chunk_map import StoredChunk

__all__ = ["FETCH_BYTES", "FETCH_FLIGHT", "FETCH_REQUESTS", "FetchAhead"]

#: Stored bytes requested or fetched and not yet taken, at most (per reader).
FETCH_BYTES: Final = 256 << 20
#: Stored bytes in flight at most (per reader): 64 MiB at 20 ms per request keeps a link
#: of 3 GB/s busy.
FETCH_FLIGHT: Final = 64 << 20
#: Requests in flight at most (per reader): small chunks need many at once.
FETCH_REQUESTS: Final = 64

Key = tuple[str, int]


def _key(chunk: StoredChunk) -> Key:
    return (chunk.rel, chunk.offset)


class FetchAhead:
    """Ranged requests for hinted chunks, in hint order, within a byte budget.

    Parameters
    ----------
    fetch
        Reads one chunk's stored bytes (raising the reader's own errors).
    size
        The stored bytes a chunk's request brings (an estimate where none is recorded).
    max_bytes, max_flight, max_requests
        The budget: bytes requested and not taken, bytes in flight, requests in flight.
    """

    def __init__(
        self,
        fetch: Callable[[StoredChunk], bytes],
        size: Callable[[StoredChunk], int],
        max_bytes: int = FETCH_BYTES,
        max_requests: int = FETCH_REQUESTS,
        max_flight: int = FETCH_FLIGHT,
    ) -> None:
        if min(max_bytes, max_requests, max_flight) < 1:
            raise ValueError(
                f"budget: expected >= 1, got {max_bytes} bytes, {max_requests} requests, "
                f"{max_flight} bytes in flight"
            )
        self._fetch = fetch
        self._size = size
        self._max_bytes = max_bytes
        self._max_requests = max_requests
        self._max_flight = max_flight
        self._lock = threading.RLock()  # a request done at once calls back in this thread
        self._hinted: OrderedDict[Key, StoredChunk] = OrderedDict()  # not requested yet
        self._started: OrderedDict[Key, tuple[Future[bytes], int]] = OrderedDict()
        self._held = 0  # bytes of the started requests, in flight or done
        self._running = 0  # requests in flight
        self._flying = 0  # their bytes
        self._executor: ThreadPoolExecutor | None = None
        self.requests = 0  # requests made, for tests and stats

    def hint(self, chunks: Iterable[StoredChunk]) -> None:
        """Chunks to be taken soon, in the order they will be."""
        with self._lock:
            for chunk in chunks:
                key = _key(chunk)
                if key not in self._started and key not in self._hinted:
                    self._hinted[key] = chunk
            self._pump()

    def take(self, chunk: StoredChunk) -> bytes | None:
        """The chunk's stored bytes when they were hinted (waiting for its request), else
        ``None`` (the caller reads them itself). A failed request raises its error."""
        key = _key(chunk)
        with self._lock:
            self._hinted.pop(key, None)
            found = self._started.pop(key, None)
        if found is None:
            return None
        future, nbytes = found
        try:
            return future.result()
        except CancelledError:
            return None  # stopped meanwhile (another user of the reader ended its pass)
        finally:
            with self._lock:
                self._held -= nbytes
                self._pump()

    def stop(self) -> None:
        """Forget every hint, wait for the requests in flight, and stop the I/O threads
        (the next hint starts new ones)."""
        with self._lock:
            self._hinted.clear()
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._started.clear()
            self._held = self._running = self._flying = 0

    @property
    def running(self) -> bool:
        """Whether I/O threads are up (from the first hint to :meth:`stop`)."""
        return self._executor is not None

    @property
    def held(self) -> int:
        """Bytes requested or fetched and not yet taken."""
        return self._held

    def _pump(self) -> None:
        """Start hinted requests, in order, while the budget allows (the lock held).

        Bytes fetched stay held until taken or until :meth:`stop`; a hint not followed
        within a pass never makes a load wait: a chunk whose request has not started is
        read by its load itself."""
        while self._hinted and self._running < self._max_requests:
            key, chunk = next(iter(self._hinted.items()))
            nbytes = self._size(chunk)
            if self._held and self._held + nbytes > self._max_bytes:
                return
            if self._flying and self._flying + nbytes > self._max_flight:
                return
            del self._hinted[key]
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self._max_requests, thread_name_prefix="ticktensor-fetch"
                )
            self._held += nbytes
            self._running += 1
            self._flying += nbytes
            self.requests += 1
            future = self._executor.submit(self._fetch, chunk)
            self._started[key] = (future, nbytes)
            future.add_done_callback(functools.partial(self._done, nbytes))

    def _done(self, nbytes: int, _: Future[bytes]) -> None:
        with self._lock:
            if self._running:  # not after stop()
                self._running -= 1
                self._flying -= nbytes
            self._pump()
