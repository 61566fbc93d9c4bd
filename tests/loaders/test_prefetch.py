"""The prefetcher's ring: a slot is refilled only once its device copy has finished; its
finalizer never waits for the producer."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable

from ticktensor.loaders._prefetch import Prefetcher, PrefetchStats, Slot, _Shared, host_delivery


class FakeEvent:
    """Stands for a CUDA event: ``query()`` says whether the copy finished."""

    def __init__(self, done: bool) -> None:
        self.done = done

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True


def ring(depth: int) -> _Shared:
    def fill(step: int, slot: Slot) -> int:
        return 1

    return _Shared(
        fill,
        range(4),
        lambda: Slot((2, 3, 1), (2, 1), False),
        host_delivery,
        depth,
        PrefetchStats(),
    )


def test_a_slot_whose_copy_runs_is_not_reused_while_the_ring_has_room() -> None:
    shared = ring(depth=1)  # at most 4 slots
    first = shared.acquire()
    first.event = FakeEvent(done=False)
    second = shared.acquire()
    assert second is not first  # the copy out of `first` may still read it
    first.event.done = True
    assert shared.acquire() is first
    for slot in shared.slots:
        slot.event = FakeEvent(done=False)
    while len(shared.slots) < shared.max_slots:
        shared.acquire().event = FakeEvent(done=False)
    # A full ring: a free slot with a running copy is taken (the producer waits on it).
    assert shared.acquire() in shared.slots
    assert shared.stats.slots_allocated == shared.max_slots
    assert shared.stats.slots_given_away == 0


def test_a_referenced_slot_is_never_reused() -> None:
    shared = ring(depth=1)
    first = shared.acquire()
    held = first.x[:1]  # a batch view the consumer keeps
    assert shared.acquire() is not first
    del held
    assert shared.acquire() is first


def small_prefetcher(
    fill: Callable[[int, Slot], int], steps: int, on_stop: Callable[[], None] | None = None
) -> Prefetcher:
    return Prefetcher(
        fill,
        range(steps),
        lambda: Slot((2, 3, 1), (2, 1), False),
        host_delivery,
        depth=2,
        timeout=None,
        name="test-producer",
        context="test",
        sample_bytes=16,
        on_stop=on_stop,
    )


def test_the_finalizer_does_not_wait_for_a_producer_waiting_on_its_thread() -> None:
    # The collector runs a dropped prefetcher's finalizer on whichever thread allocates:
    # here a chunk thread whose load the producer is waiting for.
    released = threading.Event()
    stopped: list[int] = []

    def fill(step: int, slot: Slot) -> int:
        released.wait(timeout=30)
        return 1

    prefetcher = small_prefetcher(fill, 4, on_stop=lambda: stopped.append(1))

    def loading_thread() -> None:
        prefetcher._finalizer()  # what the collector calls
        released.set()  # the work the producer waited for

    worker = threading.Thread(target=loading_thread, name="ticktensor-chunk_0")
    worker.start()
    worker.join(timeout=10)
    released.set()
    assert not worker.is_alive(), "the finalizer waited for the producer"
    assert stopped == [1]
    prefetcher._thread.join(timeout=10)
    assert not prefetcher.alive


def test_close_waits_for_the_producer() -> None:
    prefetcher = small_prefetcher(lambda step, slot: 1, 100)
    next(prefetcher)
    prefetcher.close()
    assert not prefetcher.alive


EXIT_SCRIPT = """
import atexit, sys, threading, time
seen = {}
# Registered before ticktensor's own exit handler, so it runs after it.
atexit.register(lambda: print("alive" if seen["thread"].is_alive() else "joined"))
from ticktensor.loaders._prefetch import Prefetcher, Slot, host_delivery

def fill(step, slot):
    time.sleep(0.5)
    return 1

prefetcher = Prefetcher(fill, range(100), lambda: Slot((2, 3, 1), (2, 1), False),
                        host_delivery, depth=2, timeout=None, name="ticktensor-test",
                        context="test", sample_bytes=16)
next(prefetcher)
seen["thread"] = prefetcher._thread
# The collector ran the finalizer on one of ticktensor's threads: told to stop, not joined.
finalizing = threading.Thread(target=prefetcher._finalizer, name="ticktensor-chunk_0")
finalizing.start()
finalizing.join()
sys.exit(0)  # while the producer is still in its fill
"""


def test_a_producer_left_running_is_stopped_and_joined_at_exit() -> None:
    # A daemon thread still in a native call when the interpreter finalizes aborts it.
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["joined"]
