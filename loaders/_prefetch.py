"""Background batch assembly: a thread fills a ring of reusable batch buffers ahead of use."""

from __future__ import annotations

import atexit
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import torch

from ticktensor._memory import fresh_buffer

from ._fences import Fence, Fences

__all__ = ["CudaDelivery", "PrefetchStats", "Prefetcher", "Slot", "host_delivery", "waits"]

FloatArray = npt.NDArray[np.float32]
Fill = Callable[[int, "Slot"], int]
"""``fill(step, slot)`` writes batch ``step`` into the slot's buffers and returns its size."""
Deliver = Callable[["Slot", int], tuple[Any, ...]]
"""``deliver(slot, n)`` turns the first ``n`` samples of a filled slot into a batch."""

_POLL_S: Final = 0.05  # how often a blocked thread looks at the stop flag


def waits(timeout: float | None) -> Iterator[float]:
    """Seconds to wait, slice by slice, for one batch: at most ``_POLL_S`` each, so that a
    consumer sees Ctrl-C and a dead producer between them, until ``timeout`` seconds have
    passed (never, for ``None``). The iteration ends at the deadline."""
    deadline = None if timeout is None else time.perf_counter() + timeout
    while True:
        if deadline is None:
            yield _POLL_S
            continue
        yield max(min(_POLL_S, deadline - time.perf_counter()), 0.0)
        if time.perf_counter() >= deadline:
            return


class Slot:
    """One pair of preallocated batch buffers: features ``x [B, W, F]`` and labels ``y [B, L]``.

    A slot is free when nothing outside it references its arrays. Every tensor handed to
    the consumer is made with :func:`torch.from_numpy` from these arrays (or a slice of
    them), which holds a reference to the array, and so do views and ``.numpy()`` of the
    tensor: the reference count therefore tells whether a batch cut from this slot lives.
    """

    __slots__ = ("_x_owner", "_x_refs", "_y_owner", "_y_refs", "event", "fence", "out", "x", "y")

    def __init__(self, x_shape: tuple[int, ...], y_shape: tuple[int, ...], pin: bool) -> None:
        self.x: FloatArray = _empty(x_shape, pin)
        self.y: FloatArray = _empty(y_shape, pin)
        self.event: Any = None  # CUDA event of the last device copy out of this slot
        # With reader fences: ``out`` while a batch made from the slot may be read (queued
        # or with the consumer); ``fence`` once the consumer let go, until it completes.
        self.out = False
        self.fence: Fence | None = None
        # numpy views point at the array that owns the memory, which may sit behind x.
        self._x_owner = _owner(self.x)
        self._y_owner = _owner(self.y)
        self._x_refs = sys.getrefcount(self._x_owner)
        self._y_refs = sys.getrefcount(self._y_owner)

    def is_free(self) -> bool:
        """Whether no batch made from this slot is referenced any more."""
        return (
            sys.getrefcount(self._x_owner) <= self._x_refs
            and sys.getrefcount(self._y_owner) <= self._y_refs
        )

    def reclaim(self, fences: Fences) -> None:
        """On the consumer's thread: once its batches are gone, fence what it queued."""
        if self.out and self.is_free():
            self.fence = fences.record()
            self.out = False

    def refillable(self) -> bool:
        """With reader fences: whether the consumer let go and every reader finished."""
        if self.out:
            return False
        if self.fence is not None:
            if not self.fence.query():
                return False
            self.fence = None
        return True


def _owner(array: FloatArray) -> object:
    """The object every view of ``array`` keeps referenced."""
    owner: object = array[:1].base
    return owner


def _empty(shape: tuple[int, ...], pin: bool) -> FloatArray:
    if pin:
        # Page-locked host memory; the numpy view keeps the pinned tensor alive.
        array: FloatArray = torch.empty(shape, dtype=torch.float32, pin_memory=True).numpy()
        return array
    return fresh_buffer(shape, page_aligned=True)  # its pages in place before the first fill


def host_delivery(slot: Slot, n: int) -> tuple[torch.Tensor, torch.Tensor, None]:
    """Zero-copy CPU tensors over the slot's first ``n`` samples."""
    return torch.from_numpy(slot.x[:n]), torch.from_numpy(slot.y[:n]), None


class CudaDelivery:
    """Copies each batch to ``device`` on a side stream; the consumer's stream waits on it.

    The copy is issued from the producer thread with ``non_blocking=True`` out of pinned
    slots, so it overlaps the consumer's compute. The slot keeps the copy's event and is
    refilled only after the event has completed; the events are blocking, so a producer
    waiting for one sleeps. ``device`` must be a resolved ``cuda:N``
    (:func:`~ticktensor.loaders._devices.resolve_device`).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]

    def __call__(self, slot: Slot, n: int) -> tuple[torch.Tensor, torch.Tensor, Any]:
        x, y, _ = host_delivery(slot, n)
        with torch.cuda.stream(self.stream):
            x_dev = x.to(self.device, non_blocking=True)
            y_dev = y.to(self.device, non_blocking=True)
            event = torch.cuda.Event(blocking=True)  # type: ignore[no-untyped-call]
            event.record(self.stream)
        slot.event = event
        return x_dev, y_dev, event

    def enter_thread(self) -> None:
        """In the producer thread: make ``device`` current there (a new thread starts on
        device 0), so events and streams it touches belong to this rank's GPU."""
        torch.cuda.set_device(self.device)

    def receive(self, x: torch.Tensor, y: torch.Tensor, event: Any) -> None:
        """On the consumer thread: order its current stream after the copy."""
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        # The tensors were allocated on the side stream; tell the caching allocator that
        # the consumer's stream uses them too.
        x.record_stream(current)
        y.record_stream(current)


@dataclass
class PrefetchStats:
    """Counters of one pass, written by the producer and the consumer threads."""

    batches: int = 0
    samples: int = 0
    bytes: int = 0
    wait_s: float = 0.0
    assemble_s: float = 0.0
    first_batch_s: float | None = None
    slots_allocated: int = 0
    slots_given_away: int = 0
    depth_seen: int = 0
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None

    @property
    def wall_s(self) -> float:
        """Seconds from the start of the pass to its end (or to now while it runs)."""
        return (time.perf_counter() if self.ended is None else self.ended) - self.started


@dataclass(frozen=True)
class _Failure:
    step: int
    error: BaseException


@dataclass(frozen=True)
class _Handover:
    step: int  # the first step this prefetcher did not assemble


_END: Final = object()


class _Shared:
    """What the producer thread needs; it holds no reference to the consumer's iterator."""

    def __init__(
        self,
        fill: Fill,
        steps: Sequence[int],
        make_slot: Callable[[], Slot],
        deliver: Deliver,
        depth: int,
        stats: PrefetchStats,
        extra_slots: int = 0,
        handover: Callable[[], bool] | None = None,
        fences: Fences | None = None,
    ) -> None:
        self.fill = fill
        self.fences = fences
        self.handover = handover
        self.steps = steps
        self.make_slot = make_slot
        self.deliver = deliver
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.slots: list[Slot] = []
        # Queued, one being filled, and two on the consumer's side: the batch just taken
        # from the queue and the previous one, which a `for` loop holds until the new
        # one is assigned.
        self.max_slots = depth + 3 + extra_slots
        self.stats = stats

    def acquire(self) -> Slot | None:
        """A slot to fill (``None`` when asked to stop while waiting for one).

        With reader fences, see :meth:`_acquire_fenced`; otherwise the first free one
        whose last device copy has finished.

        A free slot whose copy is still running is taken only once the ring is full (the
        producer then waits on its event); before that a new slot is added, so gathering
        the next batch overlaps the copy of the last one. A new slot also when every slot
        is still referenced by the consumer.
        """
        if self.fences is not None:
            return self._acquire_fenced()
        copying = None
        for slot in self.slots:
            if slot.is_free():
                if slot.event is None or slot.event.query():
                    return slot
                copying = copying or slot
        if copying is not None and len(self.slots) >= self.max_slots:
            return copying
        return self._new_slot()

    def _new_slot(self) -> Slot:
        """A new slot, in the ring while it has room; past that the consumer keeps old
        batches (``list(loader)``) and this buffer becomes theirs."""
        slot = self.make_slot()
        self.stats.slots_allocated += 1
        if len(self.slots) < self.max_slots:
            self.slots.append(slot)
        else:
            self.stats.slots_given_away += 1
        return slot

    def _acquire_fenced(self) -> Slot | None:
        """A slot whose readers are all done (:meth:`Slot.refillable`).

        A new slot while the ring has room; then the slot whose fence came first,
        waited for; a new one (given away) when the consumer keeps every batch; and while
        a released slot waits for the consumer's thread to fence it, a short sleep.
        """
        while not self.stop.is_set():
            pending = None
            for slot in self.slots:
                if slot.refillable():
                    return slot
                if not slot.out and pending is None:
                    pending = slot
            if len(self.slots) < self.max_slots:
                return self._new_slot()
            if pending is not None and pending.fence is not None:
                pending.fence.synchronize()
                pending.fence = None
                return pending
            if not any(slot.is_free() for slot in self.slots):
                return self._new_slot()  # the consumer keeps its batches (``list(loader)``)
            self.stop.wait(_POLL_S)  # released, not fenced yet: the consumer's next call
        return None

    def put(self, item: object) -> bool:
        """Queue ``item`` unless asked to stop first; returns whether it was queued."""
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=_POLL_S)
            except queue.Full:
                continue
            return True
        return False


#: Producer threads still running, by their shared state: stopped and joined at exit.
_RUNNING: dict[int, tuple[_Shared, threading.Thread]] = {}
_RUNNING_LOCK = threading.Lock()
_EXIT_JOIN_S: Final = 5.0


def _stop_running_at_exit() -> None:
    """Stop and join the producers still running (a pass the consumer left unfinished,
    one whose finalizer did not wait): a daemon thread still in a native call when the
    interpreter finalizes is ended by ``pthread_exit``, and unwinding through C++ frames
    that must not throw aborts the process ("terminate called without an active
    exception")."""
    with _RUNNING_LOCK:
        running = list(_RUNNING.values())
    for shared, _ in running:
        shared.stop.set()
    for _, thread in running:
        if thread is not threading.current_thread():
            thread.join(timeout=_EXIT_JOIN_S)


atexit.register(_stop_running_at_exit)


def _produce(shared: _Shared) -> None:
    """Body of the producer thread (see :func:`_fill_all`), listed in :data:`_RUNNING`
    while it runs."""
    try:
        _fill_all(shared)
    finally:
        with _RUNNING_LOCK:
            _RUNNING.pop(id(shared), None)


def _fill_all(shared: _Shared) -> None:
    """Fill, deliver and queue every step, then an end mark."""
    enter = getattr(shared.deliver, "enter_thread", None)
    if enter is not None:
        enter()
    if shared.fences is not None:
        shared.fences.enter_thread()  # waiting on a fence must not touch GPU 0
    steps = shared.steps
    for position, step in enumerate(steps):
        if shared.stop.is_set():
            return
        try:
            slot = shared.acquire()
            if slot is None:
                return
            if slot.event is not None:
                slot.event.synchronize()  # the last device copy out of this slot is done
                slot.event = None
            started = time.perf_counter()
            n = shared.fill(step, slot)
            item = (step, n, *shared.deliver(slot, n))
            slot.out = True
            shared.stats.assemble_s += time.perf_counter() - started
        except BaseException as exc:  # handed to the consumer, which raises it
            shared.put(_Failure(step, exc))
            return
        queued = shared.put(item)
        del item, slot  # so that the slot counts as free once the consumer drops the batch
        if not queued:
            return
        if shared.handover is not None and position + 1 < len(steps) and shared.handover():
            shared.put(_Handover(steps[position + 1]))  # the rest goes to another engine
            return
    shared.put(_END)


def _stop(
    shared: _Shared,
    thread: threading.Thread,
    on_stop: Callable[[], None] | None,
    wait: bool | None = None,
) -> None:
    """Stop the producer (and join it when ``wait``), then run ``on_stop``.

    As a finalizer (``wait=None``) it waits unless it runs on one of ticktensor's own
    threads: the cyclic collector runs it on whichever thread allocates, which may be
    one the producer is waiting for (a chunk thread whose load the producer needs); the
    producer then sees the stop and ends by itself.
    """
    shared.stop.set()
    if wait is None:
        wait = not threading.current_thread().name.startswith("ticktensor-")
    if wait and thread is not threading.current_thread() and thread.is_alive():
        thread.join()
    if on_stop is not None:
        on_stop()
    while True:  # release queued batches and their buffers now
        try:
            shared.queue.get_nowait()
        except queue.Empty:
            break


class Prefetcher(Iterator[tuple[Any, ...]]):
    """Assembles the batches ``steps`` in a background thread, up to ``depth`` ahead.

    Items are ``(step, n, *deliver(slot, n))`` in the order of ``steps``. The thread is
    stopped and joined by :meth:`close`, at the end, on an error, and when the prefetcher
    is garbage collected, so breaking out of a loop, an exception or a
    ``KeyboardInterrupt`` in the consumer leave no thread behind.

    Parameters
    ----------
    fill
        Writes batch ``step`` into a slot and returns its size; runs in the thread.
    steps
        The steps to assemble, in order.
    make_slot
        Allocates a new slot.
    deliver
        Turns a filled slot into what the consumer gets; what it returns must keep
        referencing the slot's arrays while the batch is in use (or set ``slot.event``).
    depth
        Batches assembled ahead of the consumer, at least 1.
    timeout
        Seconds the consumer waits for one batch before :class:`TimeoutError`; ``None``
        or 0 waits as long as it takes.
    name
        Name of the background thread.
    context
        Added to error notes, e.g. ``"epoch 3, rank 0 of 8"``.
    sample_bytes
        Bytes one sample delivers, for the statistics.
    extra_slots
        Slots the ring may hold beyond ``depth + 3``, for a consumer that keeps more
        batches referenced (the DALI backend holds the batches DALI may still read).
    on_stop
        Called once the background thread has been joined (e.g. to stop helper threads
        it used).
    handover
        Asked after each batch is queued: once it returns true, the thread stops there and
        the iteration ends with :attr:`handed_over` set to the first step not assembled,
        for another engine to go on from (see :class:`NativePrefetcher`).
    fences
        Reader fences (see :mod:`~ticktensor.loaders._fences`) for host batches that the
        consumer may copy asynchronously: a slot is refilled only after the fence the
        consumer's thread records once the slot's batches are gone has completed.
    """

    handed_over: int | None = None

    def __init__(
        self,
        fill: Fill,
        steps: Sequence[int],
        make_slot: Callable[[], Slot],
        deliver: Deliver,
        *,
        depth: int,
        timeout: float | None,
        name: str,
        context: str,
        sample_bytes: int,
        on_stop: Callable[[], None] | None = None,
        extra_slots: int = 0,
        handover: Callable[[], bool] | None = None,
        fences: Fences | None = None,
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth: expected >= 1, got {depth}")
        self.stats = PrefetchStats()
        self._shared = _Shared(
            fill, steps, make_slot, deliver, depth, self.stats, extra_slots, handover, fences
        )
        self._timeout = timeout if timeout else None
        self._context = context
        self._sample_bytes = sample_bytes
        self._done = False
        self._thread = threading.Thread(
            target=_produce, args=(self._shared,), name=name, daemon=True
        )
        self._finalizer = weakref.finalize(self, _stop, self._shared, self._thread, on_stop)
        self._on_stop = on_stop
        with _RUNNING_LOCK:
            _RUNNING[id(self._shared)] = (self._shared, self._thread)
        try:
            self._thread.start()
        except BaseException:
            with _RUNNING_LOCK:
                _RUNNING.pop(id(self._shared), None)
            raise

    def __next__(self) -> tuple[Any, ...]:
        if self._done:
            raise StopIteration
        item = self._get()
        if item is _END or isinstance(item, _Handover):
            if isinstance(item, _Handover):
                self.handed_over = item.step
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            error = item.error
            error.add_note(
                f"while assembling batch {item.step} ({self._context}) in the loader's "
                f"background thread {self._thread.name!r}"
            )
            raise error
        stats = self.stats
        n = int(item[1])
        stats.batches += 1
        stats.samples += n
        stats.bytes += n * self._sample_bytes
        if stats.first_batch_s is None:
            stats.first_batch_s = time.perf_counter() - stats.started
        return tuple(item)

    def _reclaim(self) -> None:
        """Fence the slots whose batches the consumer let go (with reader fences)."""
        fences = self._shared.fences
        if fences is not None:
            for slot in list(self._shared.slots):
                slot.reclaim(fences)

    def _get(self) -> Any:
        shared = self._shared
        started = time.perf_counter()
        self.stats.depth_seen += shared.queue.qsize()
        try:
            for wait in waits(self._timeout):
                self._reclaim()
                try:
                    return shared.queue.get(timeout=wait)
                except queue.Empty:
                    pass
                if not self._thread.is_alive() and shared.queue.empty():
                    self.close()
                    raise RuntimeError(
                        f"the loader's background thread {self._thread.name!r} ended without "
                        f"batch {self._next_step()} ({self._context})"
                    )
            self.close()
            raise TimeoutError(
                f"batch {self._next_step()} ({self._context}): not assembled within "
                f"the DataLoader timeout of {self._timeout:g} s"
            )
        finally:
            self.stats.wait_s += time.perf_counter() - started

    def _next_step(self) -> int:
        steps = self._shared.steps
        return int(steps[self.stats.batches]) if self.stats.batches < len(steps) else -1

    @property
    def queue_depth(self) -> int:
        """Batches assembled and waiting for the consumer right now."""
        return self._shared.queue.qsize()

    @property
    def slots(self) -> list[Slot]:
        """The ring's slots (batches the consumer keeps may still use them)."""
        return list(self._shared.slots)

    @property
    def alive(self) -> bool:
        """Whether the background thread is running."""
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop and join the background thread and drop the batches it queued.

        With reader fences, the slots' memory is let go only once every copy queued from
        it has run: the batches the consumer dropped since its last ``next()`` are fenced
        here, and every pending fence is waited for.
        """
        self._done = True
        if self.stats.ended is None:
            self.stats.ended = time.perf_counter()
        if self._finalizer.detach() is not None:
            _stop(self._shared, self._thread, self._on_stop, wait=True)
            self._reclaim()
            for slot in self._shared.slots:
                if slot.fence is not None:
                    slot.fence.synchronize()
                    slot.fence = None
