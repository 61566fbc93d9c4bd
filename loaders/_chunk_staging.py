"""Chunk staging for device residency: chunks decoded ahead, on a thread, into reused host buffers.

The device-resident mode copies each chunk to the device when a batch first needs it.
Decoding that chunk in the consumer's thread, then copying it from pageable memory with a
synchronous ``copy_``, would stall training twice: the thread decodes instead of queuing
work, and a synchronous copy waits for every kernel queued before it. So the chunks of
the next batches are decoded here, ahead, into page-locked buffers (when CUDA is
present), and the consumer queues a ``non_blocking`` copy from them on its copy stream.

The buffers are allocated once and reused, and the rule is the batch ring's (see
:mod:`~ticktensor.loaders._fences`): **a buffer is refilled only when every reader is
done**. The consumer hands a buffer back with :meth:`ChunkStager.release` once its copy
is queued; that records a fence on the stream of that copy, and the staging thread
decodes into that buffer again only after the fence has completed.
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

from ._fences import Fence, Fences

__all__ = ["ChunkStager"]

Floats = npt.NDArray[np.float32]
_names = itertools.count()


class _Shared:
    """What the staging thread works on; it holds no reference to the :class:`ChunkStager`,
    so dropping the stager stops the thread."""

    def __init__(
        self,
        load: Callable[[int], Floats],
        shape: tuple[int, int],
        pin: bool,
        capacity: int,
        fences: Fences | None,
    ) -> None:
        self.load = load
        self.fences = fences
        self.shape = shape
        self.pin = pin
        self.capacity = capacity
        self.max_buffers = 2 * capacity  # staged, and released with their copies pending
        self.lock = threading.Condition()
        self.wanted: OrderedDict[int, None] = OrderedDict()  # requested, in order of need
        self.staged: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # chunk: buffer, rows
        self.taken: dict[int, torch.Tensor] = {}  # data_ptr: buffer, until released
        self.free: list[tuple[torch.Tensor, Fence | None]] = []  # oldest release first
        self.allocated = 0
        self.busy: int | None = None  # the chunk being decoded now
        self.errors: dict[int, BaseException] = {}
        self.stop = False
        self.running = False  # a thread works on the requests (set and cleared under lock)
        self.staged_total = 0

    def next_job(self) -> tuple[int, torch.Tensor | None, Fence | None] | None:
        """The next chunk to decode, the buffer to decode it into (``None``: allocate a new
        one, outside the lock) and the fence to wait for first; ``None`` (the thread
        ends) when asked to stop or when nothing is wanted:
        :meth:`ChunkStager.stage` starts a new thread for the next requests, so no thread
        idles between passes."""
        with self.lock:
            while True:
                if self.stop or not self.wanted:
                    self.running = False
                    return None
                if len(self.staged) < self.capacity:
                    found = self._buffer()
                    if found is not None:
                        chunk, _ = self.wanted.popitem(last=False)
                        self.busy = chunk
                        return chunk, *found
                self.lock.wait()

    def _buffer(self) -> tuple[torch.Tensor | None, Fence | None] | None:
        """A buffer to decode into (under the lock): a released one whose readers are done,
        else room for a new one (``None``: the thread allocates it outside the lock, as
        page-locked allocation maps and locks pages, milliseconds the consumer must not
        wait for), else the one released first, with its fence (waited for outside the
        lock), else none until the consumer releases one."""
        for position, (buffer, fence) in enumerate(self.free):
            if fence is None or fence.query():
                del self.free[position]
                return buffer, None
        if self.allocated < self.max_buffers:
            self.allocated += 1  # reserved now, allocated by the thread
            return None, None
        if self.free:
            return self.free.pop(0)
        return None

    def allocate(self) -> torch.Tensor:
        """A new buffer (outside the lock)."""
        return torch.empty(self.shape, dtype=torch.float32, pin_memory=self.pin)

    def done(
        self, chunk: int, buffer: torch.Tensor | None, rows: int, error: BaseException | None
    ) -> None:
        with self.lock:
            self.busy = None
            if error is not None:
                self.errors[chunk] = error
            if buffer is None:  # its allocation failed: give the room back
                self.allocated -= 1
            elif error is None and not self.stop:
                self.staged[chunk] = (buffer, buffer[:rows])
                self.staged_total += 1
            else:
                self.free.append((buffer, None))
            self.lock.notify_all()


def _run(shared: _Shared) -> None:
    """The staging thread: decode requested chunks until asked to stop."""
    if shared.fences is not None:
        shared.fences.enter_thread()
    while (job := shared.next_job()) is not None:
        chunk, buffer, fence = job
        rows, error = 0, None
        try:
            if buffer is None:
                buffer = shared.allocate()
            elif fence is not None:
                fence.synchronize()  # the last copy out of this buffer has run
            values = shared.load(chunk)
            rows = int(values.shape[0])
            buffer.numpy()[:rows] = values
        except BaseException as exc:  # raised again in the consumer by take()
            error = exc
        shared.done(chunk, buffer, rows, error)


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
        normalization applied), ``rows`` at most ``shape[0]``.
    shape
        ``(rows, F)`` of a buffer: the largest chunk.
    pin
        Stage into page-locked memory (for asynchronous copies to a GPU).
    capacity
        Staged chunks held at most; the thread waits for the consumer to take one. Up to
        twice as many buffers exist: the others wait for the copies queued from them.
    fences
        Records a fence on the stream of the copies at :meth:`release`; ``None`` when the
        copies out of the buffers are done when ``copy_`` returns (the CPU).
    """

    def __init__(
        self,
        load: Callable[[int], Floats],
        *,
        shape: tuple[int, int],
        pin: bool,
        capacity: int,
        fences: Fences | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: expected >= 1, got {capacity}")
        self._shared = _Shared(load, shape, pin, capacity, fences)
        self._fences = fences
        self._pid = os.getpid()
        weakref.finalize(self, _stop, self._shared)

    def stage(self, chunks: Iterable[int]) -> None:
        """Want exactly ``chunks`` decoded ahead, in this order: requests and staged
        chunks not among them are dropped (taken elsewhere, or no longer ahead)."""
        shared = self._shared
        numbers = [int(chunk) for chunk in chunks]
        keep = set(numbers)
        with shared.lock:
            self._after_fork()
            for old in [c for c in shared.staged if c not in keep]:
                buffer, _ = shared.staged.pop(old)
                shared.free.append((buffer, None))  # never copied from
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
        """The staged rows of ``chunk``, or ``None`` when it is neither staged nor being
        staged (the caller loads it itself). A chunk the thread is decoding now is waited
        for: decoding it here too would cost the consumer the whole decode. Hand the rows
        back with :meth:`release` once the copy out of them is queued. A decode error is
        raised here."""
        shared = self._shared
        with shared.lock:
            self._after_fork()
            shared.wanted.pop(chunk, None)
            shared.lock.wait_for(lambda: shared.busy != chunk)
            error = shared.errors.pop(chunk, None)
            if error is not None:
                raise error
            found = shared.staged.pop(chunk, None)
            shared.lock.notify_all()
            if found is None:
                return None
            buffer, rows = found
            shared.taken[rows.data_ptr()] = buffer
            return rows

    def _after_fork(self) -> None:
        """In a forked child (under the lock): no thread works on the requests there."""
        if os.getpid() != self._pid:
            shared = self._shared
            self._pid, shared.running, shared.busy = os.getpid(), False, None

    def release(self, rows: torch.Tensor) -> None:
        """The copy out of ``rows`` (from :meth:`take`) is queued on the stream the fences
        record on (the resident mode's copy stream): its buffer is refilled once a fence
        recorded now has completed."""
        fence = None if self._fences is None else self._fences.record()
        shared = self._shared
        with shared.lock:
            buffer = shared.taken.pop(rows.data_ptr())
            shared.free.append((buffer, fence))
            shared.lock.notify_all()

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
    def buffers(self) -> int:
        """Host buffers allocated since the stager was made."""
        return self._shared.allocated

    @property
    def staged_total(self) -> int:
        """Chunks staged since the stager was made."""
        return self._shared.staged_total
