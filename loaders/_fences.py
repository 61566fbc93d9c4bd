"""Reader fences: a pinned batch buffer is refilled only after every copy queued from it is done.

A consumer that copies a host batch to the GPU with ``x.cuda(non_blocking=True)`` and then
drops ``x`` leaves the copy queued on a CUDA stream, behind the previous step's kernels,
still reading the buffer. Reference counts say the buffer is free; the GPU has not read
it yet. So when the consumer's thread sees that a buffer's last batch is gone, it records
a fence on the current stream of every device this process uses (everything queued there
before, that copy included, is ordered before the fence) and the buffer is refilled only
once all of them have completed. torch's own pinned-memory allocator does the same with
one event per use.

Stream rules for a consumer of pinned host batches: a copy queued on the current stream
of any device (``x.to("cuda:1", non_blocking=True)`` with ``cuda:0`` current included),
before the batch is let go, is covered. A copy on another stream must be joined to that
device's current stream (``torch.cuda.current_stream().wait_stream(side)``) before the
next ``next()``, or be named with ``DataLoader.add_reader_stream``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch

__all__ = ["AllOf", "CopyStream", "CudaFences", "Fence", "Fences", "devices_with_context"]


class Fence(Protocol):
    """A point on a stream: complete once everything queued before it has run."""

    def query(self) -> bool:
        """Whether the fence has completed (never blocks)."""
        ...

    def synchronize(self) -> None:
        """Wait until the fence has completed."""
        ...


class Fences(Protocol):
    """Records fences on the streams the consumer's copies may be queued on."""

    def record(self) -> Fence: ...

    def enter_thread(self) -> None:
        """In a thread that waits on the fences: make their device its current one."""
        ...


class AllOf:
    """A fence made of several: complete once each of them is."""

    def __init__(self, fences: list[Fence]) -> None:
        self._fences = fences

    def query(self) -> bool:
        return all(fence.query() for fence in self._fences)

    def synchronize(self) -> None:
        for fence in self._fences:
            fence.synchronize()


def devices_with_context() -> list[int]:
    """The CUDA devices on which this process has a primary context (none before CUDA is
    initialised). A copy can be queued only on such a device; asking creates none."""
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return []
    has_context: Any = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    count = torch.cuda.device_count()
    if has_context is None:  # a build without the query: every device may hold a copy
        return list(range(count))
    return [index for index in range(count) if has_context(index)]


class CudaFences:
    """Fences as CUDA events on the current stream of every device with a context.

    ``device`` is the rank's own GPU: the thread that waits on the fences makes it
    current (:meth:`enter_thread`), so that waiting opens no context on GPU 0. The
    events are blocking: a producer that waits for one sleeps instead of spinning a core.
    Creating this object calls no CUDA function.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._reader_streams: list[Any] = []

    def add_reader_stream(self, stream: Any) -> None:
        """Fence ``stream`` too: the consumer queues copies of host batches on it (a side
        stream it does not join to the device's current stream)."""
        self._reader_streams.append(stream)

    def enter_thread(self) -> None:
        """A new thread starts on device 0: waiting on an event there would give this
        process a CUDA context on GPU 0 too."""
        torch.cuda.set_device(self.device)

    def record(self) -> Fence:
        streams = [torch.cuda.current_stream(index) for index in devices_with_context()]
        fences: list[Fence] = []
        for stream in [*streams, *self._reader_streams]:
            event = torch.cuda.Event(blocking=True)  # type: ignore[no-untyped-call]
            event.record(stream)
            fences.append(event)
        return AllOf(fences)


class CopyStream:
    """A side stream for host-to-device copies that overlap the consumer's compute, and
    the fences of the host buffers those copies read.

    :meth:`copies` queues the copies made inside it on the side stream, ordered after
    the gathers queued so far (they may still read the device memory a copy overwrites)
    and before everything queued on the consumer's current stream afterwards (the current
    stream waits on an event recorded after them). Each gather is marked with
    :meth:`read` (an event on the stream it was queued on, the latest per stream), so a
    copy waits for the gathers only, not for the compute the consumer queued after them:
    it overlaps that compute. Before any gather is marked it waits for everything queued
    on the current stream. A fence
    (:meth:`record`) is an event on the side stream: it completes once the copies queued
    before it have read their host buffers. The stream is created at the first copy, on
    the consumer's thread; creating this object calls no CUDA function.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._stream: Any = None
        self._reads: dict[Any, Any] = {}  # per stream, an event after its latest gather

    def _side(self) -> Any:
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        return self._stream

    @contextmanager
    def copies(self) -> Iterator[None]:
        """Queue the copies made inside on the side stream, between the consumer's work
        queued before and after."""
        current = torch.cuda.current_stream(self.device)
        side = self._side()
        if self._reads:
            for read in self._reads.values():
                side.wait_event(read)
            self._reads.clear()
        else:
            side.wait_stream(current)
        try:
            with torch.cuda.stream(side):
                yield
        finally:
            copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
            copied.record(side)
            current.wait_event(copied)

    def read(self) -> None:
        """Mark the end of a gather just queued on the current stream: later copies wait
        for it (and for nothing queued there after it)."""
        current = torch.cuda.current_stream(self.device)
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(current)
        self._reads[current] = event  # streams hash by their handle and device

    def enter_thread(self) -> None:
        """The thread that waits on the fences makes the device current (see
        :meth:`CudaFences.enter_thread`)."""
        torch.cuda.set_device(self.device)

    def record(self) -> Fence:
        event = torch.cuda.Event(blocking=True)  # type: ignore[no-untyped-call]
        event.record(self._side())
        fence: Fence = event
        return fence
