"""Batches gathered by a native thread, for passes whose chunks are all loaded.

Once every chunk of a dataset is loaded nothing needs planning, loading or evicting: a
batch is one native gather. :class:`NativePrefetcher` runs those gathers back to back on
a C++ thread (:class:`ticktensor.kernels.SamplePrefetcher`) that never takes the GIL,
where :class:`Prefetcher` runs a Python thread that needs it between batches. The ring
protocol is the same: a slot is filled again only once the consumer's batches made from
it are gone, which this side sees from reference counts and reports to the thread.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ._fences import Fence, Fences
from ._prefetch import Prefetcher, PrefetchStats, Slot, waits

if TYPE_CHECKING:
    from .dataset import WindowDataset
    from .sharding import ShardPlan

__all__ = ["NativePrefetcher", "Relay"]

_BATCH, _TIMEOUT, _END = 0, 1, 2


def _stop(native: Any, on_stop: Callable[[], None] | None) -> None:
    """Stop and join the native thread, then run ``on_stop``; safe from a finalizer."""
    native.stop()
    if on_stop is not None:
        on_stop()


class NativePrefetcher(Iterator[tuple[Any, ...]]):
    """Steps ``first_step..`` of ``plan``, gathered by a native thread, up to ``depth`` ahead.

    Items are ``(step, n, x, y, None)`` with ``x`` and ``y`` zero-copy CPU tensors, as
    :class:`Prefetcher` with host delivery yields them; the parameters mean the same.
    ``stats`` and ``slots`` may be the statistics and the slots of the :class:`Prefetcher`
    that started the pass and handed over; its slots are filled again once free. Every
    chunk of ``dataset`` must be loaded. With ``fences``, a slot the consumer let go goes
    back to the thread only once the fence recorded then has completed.
    """

    def __init__(
        self,
        dataset: WindowDataset,
        plan: ShardPlan,
        make_slot: Callable[[], Slot],
        *,
        depth: int,
        timeout: float | None,
        context: str,
        sample_bytes: int,
        first_step: int = 0,
        stats: PrefetchStats | None = None,
        slots: Sequence[Slot] = (),
        on_stop: Callable[[], None] | None = None,
        fences: Fences | None = None,
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth: expected >= 1, got {depth}")
        self.stats = stats or PrefetchStats()
        first, count = plan.step_ranges()
        self._first_step = int(first_step)
        self._make_slot = make_slot
        self._native = dataset.runtime.prefetcher(
            dataset.index,
            plan.order,
            (first[first_step:], count[first_step:]),
            capacity=plan.batch_size,
            depth=depth,
        )
        self._finalizer = weakref.finalize(self, _stop, self._native, on_stop)
        self._timeout = timeout if timeout else None
        self._context = context
        self._sample_bytes = sample_bytes
        self._done = False
        self._pid = os.getpid()
        self._slots: dict[int, Slot] = {}  # every slot the thread may still fill
        self._out: list[int] = []  # slots whose batches the consumer got, oldest first
        self._depth = depth
        self._ring = depth + 3  # as Prefetcher: queued, one filling, two with the consumer
        self._next_step = self._first_step
        self._fill_s = 0.0
        self._spare = list(slots)  # a handing-over prefetcher's slots, taken once free
        self._fences = fences
        self._fenced: list[tuple[int, Fence]] = []  # let go, fence pending, oldest first
        for _ in range(depth + 1):
            self._add_slot()

    def __next__(self) -> tuple[Any, ...]:
        if self._done:
            raise StopIteration
        if os.getpid() != self._pid:
            self.close()
            raise RuntimeError(
                f"the loader's native thread runs in process {self._pid} ({self._context}); "
                "an iterator made before fork() cannot go on in the child: iterate the "
                "loader again there"
            )
        self._recycle()
        stats = self.stats
        stats.depth_seen += self._native.waiting
        step, slot_number, n = self._get()
        self._out.append(slot_number)
        slot = self._slots[slot_number]
        stats.batches += 1
        stats.samples += n
        stats.bytes += n * self._sample_bytes
        fill_s = self._native.fill_seconds
        stats.assemble_s += fill_s - self._fill_s
        self._fill_s = fill_s
        if stats.first_batch_s is None:
            stats.first_batch_s = time.perf_counter() - stats.started
        return step, n, torch.from_numpy(slot.x[:n]), torch.from_numpy(slot.y[:n]), None

    def _recycle(self) -> None:
        """Give the thread back the slots the consumer let go, and a slot to fill if it
        has none (a consumer that keeps its batches, e.g. ``list(loader)``)."""
        kept = []
        for number in self._out:
            if not self._slots[number].is_free():
                kept.append(number)
            elif self._fences is not None:
                self._fenced.append((number, self._fences.record()))
            else:
                self._native.release(number)
        self._out = kept
        self._release_fenced()
        with_thread = len(self._slots) - len(kept) - len(self._fenced)
        if with_thread > self._depth:
            return
        if len(self._slots) >= self._ring:
            if with_thread > 0:
                return
            if self._fenced:  # the reader that finishes first frees a slot
                number, fence = self._fenced.pop(0)
                fence.synchronize()
                self._native.release(number)
                return
            # The consumer holds every slot: its oldest batch takes its buffers along.
            del self._slots[kept.pop(0)]
            self.stats.slots_given_away += 1
        self._add_slot()

    def _release_fenced(self) -> None:
        """Give the thread the let-go slots whose fences have completed, in order."""
        while self._fenced and self._fenced[0][1].query():
            number, _ = self._fenced.pop(0)
            self._native.release(number)

    def _add_slot(self) -> None:
        fences = self._fences
        if fences is not None:
            for spare in self._spare:
                spare.reclaim(fences)
        free = [
            i
            for i, spare in enumerate(self._spare)
            if spare.is_free() and (fences is None or spare.refillable())
        ]
        if free:
            slot = self._spare.pop(free[0])
        else:
            slot = self._make_slot()
            self.stats.slots_allocated += 1
        self._slots[self._native.add_slot(slot.x, slot.y)] = slot

    def _get(self) -> tuple[int, int, int]:
        native = self._native
        started = time.perf_counter()
        try:
            for wait in waits(self._timeout):
                self._release_fenced()
                try:
                    kind, step, slot, n = native.next(wait)
                except BaseException as error:
                    failed = native.failed_step
                    self.close()
                    if failed >= 0:
                        error.add_note(
                            f"while assembling batch {self._first_step + failed} "
                            f"({self._context}) in the loader's native thread"
                        )
                    raise
                if kind == _BATCH:
                    self._next_step = self._first_step + step + 1
                    return self._first_step + step, slot, n
                if kind == _END:
                    self.close()
                    raise StopIteration
                if not native.running:  # a finished thread reports the end instead
                    self.close()
                    raise RuntimeError(
                        f"the loader's native thread is not running ({self._context})"
                    )
            self.close()
            raise TimeoutError(
                f"batch {self._next_step} ({self._context}): "
                f"not assembled within the DataLoader timeout of {self._timeout:g} s"
            )
        finally:
            self.stats.wait_s += time.perf_counter() - started

    @property
    def queue_depth(self) -> int:
        """Batches assembled and waiting for the consumer right now."""
        return int(self._native.waiting)

    @property
    def alive(self) -> bool:
        """Whether the native thread is running."""
        return bool(self._native.running)

    def close(self) -> None:
        """Stop and join the native thread and drop the batches it filled."""
        self._done = True
        if self.stats.ended is None:
            self.stats.ended = time.perf_counter()
        self._finalizer()


class Relay(Iterator[tuple[Any, ...]]):
    """A pass that starts on a :class:`Prefetcher` and goes on natively once it hands over.

    The first batches of a pass over a dataset whose chunks are not all loaded yet need
    the Python thread, which loads them; when the last one is in, the prefetcher stops
    after its current batch and ``then(step, stats, slots)`` makes the engine for the rest.
    """

    def __init__(
        self,
        first: Prefetcher,
        then: Callable[[int, PrefetchStats, Sequence[Slot]], NativePrefetcher],
    ) -> None:
        self.stats = first.stats
        self._current: Prefetcher | NativePrefetcher = first
        self._then = then

    def __next__(self) -> tuple[Any, ...]:
        try:
            return next(self._current)
        except StopIteration:
            current = self._current
            if not isinstance(current, Prefetcher) or current.handed_over is None:
                raise
        self.stats.ended = None  # the pass goes on
        self._current = self._then(current.handed_over, self.stats, current.slots)
        return next(self._current)

    @property
    def engine(self) -> str:
        """``"python"`` or ``"native"``: which thread assembles the batches now."""
        return "native" if isinstance(self._current, NativePrefetcher) else "python"

    @property
    def queue_depth(self) -> int:
        """Batches assembled and waiting for the consumer right now."""
        return self._current.queue_depth

    @property
    def alive(self) -> bool:
        """Whether the current engine's thread is running."""
        return self._current.alive

    def close(self) -> None:
        """Stop whichever engine runs now."""
        self._current.close()
