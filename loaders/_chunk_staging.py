"""Chunk staging for device residency: chunks decoded ahead, on a thread, into host buffers.

The device-resident mode copies each chunk to the device when a batch first needs it.
Decoding that chunk in the consumer's thread, then copying it from pageable memory with a
synchronous ``copy_``, would stall training twice: the thread decodes instead of queuing
work, and a synchronous copy waits for every kernel queued before it. So the chunks of
the next batches are decoded here, ahead, into page-locked buffers (when CUDA is
present), and the consumer queues a ``non_blocking`` copy from them on its own stream.
A staged buffer is dropped by this side as soon as the copy is queued: torch's pinned
allocator does not hand its memory out again before that copy has run.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["ChunkStager"]

Floats = npt.NDArray[np.float32]
_names = itertools.count()


class _Shared:
    """What the staging thread works on; it holds no reference to the :class:`ChunkStager`,
    so dropping the stager stops the thread."""

    def __init__(self, load: Callable[[int], Floats], pin: bool, capacity: int) -> None:
        self.load = load
        self.pin = pin
        self.capacity = capacity
        self.lock = threading.Condition()
        self.wanted: OrderedDict[int, None] = OrderedDict()  # requested, in order of need
        self.staged: dict[int, torch.Tensor] = {}
        self.busy: int | None = None  # the chunk being decoded now
        self.errors: dict[int, BaseException] = {}
        self.stop = False
        self.running = False  # a thread works on the requests (set and cleared under lock)
        self.staged_total = 0

    def next_chunk(self) -> int | None:
        """The next chunk to decode, waiting for room; ``None`` (the thread ends) when
        asked to stop or when nothing is wanted: :meth:`ChunkStager.stage` starts a new
        thread for the next requests, so no thread idles between passes."""
        with self.lock:
            self.lock.wait_for(
                lambda: self.stop or not self.wanted or len(self.staged) < self.capacity
            )
            if self.stop or not self.wanted:
                self.running = False
                return None
            chunk, _ = self.wanted.popitem(last=False)
            self.busy = chunk
            return chunk

    def decode(self, chunk: int) -> torch.Tensor:
        values = self.load(chunk)
        host = torch.empty(values.shape, dtype=torch.float32, pin_memory=self.pin)
        host.numpy()[...] = values
        return host

    def done(self, chunk: int, staged: torch.Tensor | None, error: BaseException | None) -> None:
        with self.lock:
            self.busy = None
            if error is not None:
                self.errors[chunk] = error
            elif staged is not None and not self.stop:
                self.staged[chunk] = staged
                self.staged_total += 1
            self.lock.notify_all()


def _run(shared: _Shared) -> None:
    """The staging thread: decode requested chunks until asked to stop."""
    while (chunk := shared.next_chunk()) is not None:
        staged, error = None, None
        try:
            staged = shared.decode(chunk)
        except BaseException as exc:  # raised again in the consumer by take()
            error = exc
        shared.done(chunk, staged, error)


def _stop(shared: _Shared) -> None:
    with shared.lock:
        shared.stop = True
        shared.wanted.clear()
        shared.staged.clear()
        shared.lock.notify_all()


class ChunkStager:
    """Decodes requested chunks ahead on one background thread, at most ``capacity`` held.

    Parameters
    ----------
    load
        ``load(chunk)``: the chunk's rows as ``float32 [rows, F]`` (feature subset and
        normalization applied).
    pin
        Stage into page-locked memory (for asynchronous copies to a GPU).
    capacity
        Staged chunks held at most; the thread waits for the consumer to take one.
    """

    def __init__(self, load: Callable[[int], Floats], *, pin: bool, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: expected >= 1, got {capacity}")
        self._shared = _Shared(load, pin, capacity)
        self._pid = os.getpid()
        weakref.finalize(self, _stop, self._shared)

    def stage(self, chunks: Iterable[int]) -> None:
        """Want exactly ``chunks`` decoded ahead, in this order: requests and staged
        chunks not among them are dropped (taken elsewhere, or no longer ahead)."""
        shared = self._shared
        numbers = [int(chunk) for chunk in chunks]
        keep = set(numbers)
        with shared.lock:
            if os.getpid() != self._pid:  # a forked child has no thread: start afresh
                self._pid, shared.running, shared.busy = os.getpid(), False, None
            for old in [c for c in shared.staged if c not in keep]:
                del shared.staged[old]
            shared.wanted.clear()
            for number in numbers:
                if number not in shared.staged and number != shared.busy:
                    shared.wanted.setdefault(number, None)
            if shared.wanted and not shared.running:
                shared.running = True
                threading.Thread(
                    target=_run,
                    args=(shared,),
                    name=f"ticktensor-stage-{next(_names)}",
                    daemon=True,
                ).start()
            shared.lock.notify_all()

    def take(self, chunk: int) -> torch.Tensor | None:
        """The staged rows of ``chunk`` (then no longer held here), or ``None`` when it is
        not staged (the caller loads it itself). A decode error is raised here."""
        shared = self._shared
        with shared.lock:
            shared.wanted.pop(chunk, None)
            error = shared.errors.pop(chunk, None)
            if error is not None:
                raise error
            staged = shared.staged.pop(chunk, None)
            shared.lock.notify_all()
            return staged

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every request is staged or the stager is full (tests, benchmarks)."""
        shared = self._shared
        with shared.lock:
            return shared.lock.wait_for(
                lambda: (
                    shared.busy is None
                    and (not shared.wanted or len(shared.staged) >= shared.capacity)
                ),
                timeout,
            )

    @property
    def held(self) -> int:
        """Chunks staged and not taken yet."""
        return len(self._shared.staged)

    @property
    def staged_total(self) -> int:
        """Chunks staged since the stager was made."""
        return self._shared.staged_total
