"""Reader fences: a pinned batch buffer is refilled only after every copy queued from it is done.

A consumer that copies a host batch to the GPU with ``x.cuda(non_blocking=True)`` and then
drops ``x`` leaves the copy queued on its CUDA stream, behind the previous step's kernels,
still reading the buffer. Reference counts say the buffer is free; the GPU has not read
it yet. So when the consumer's thread sees that a buffer's last batch is gone, it records
a fence on its current stream (everything it queued before, that copy included, is ordered
before the fence) and the buffer is refilled only once the fence has completed. torch's
own pinned-memory allocator does the same with one event per use.
"""

from __future__ import annotations

from typing import Protocol

import torch

__all__ = ["CudaFences", "Fence", "Fences"]


class Fence(Protocol):
    """A point on a stream: complete once everything queued before it has run."""

    def query(self) -> bool:
        """Whether the fence has completed (never blocks)."""
        ...

    def synchronize(self) -> None:
        """Wait until the fence has completed."""
        ...


class Fences(Protocol):
    """Records fences on the calling thread's current stream."""

    def record(self) -> Fence: ...

    def enter_thread(self) -> None:
        """In a thread that waits on the fences: make their device its current one."""
        ...


class CudaFences:
    """Fences as CUDA events on the current stream of ``device``.

    The events are blocking: a producer that waits for one sleeps instead of spinning a
    core. A copy the consumer queues on another device's stream is not covered: copy on
    the rank's own device (``torch.cuda.set_device(local_rank)``, then ``x.cuda()``).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def enter_thread(self) -> None:
        """A new thread starts on device 0: waiting on an event there would give this
        process a CUDA context on GPU 0 too."""
        torch.cuda.set_device(self.device)

    def record(self) -> Fence:
        event = torch.cuda.Event(blocking=True)  # type: ignore[no-untyped-call]
        event.record(torch.cuda.current_stream(self.device))
        fence: Fence = event
        return fence
