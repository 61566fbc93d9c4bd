"""The prefetcher's ring: a slot is refilled only once its device copy has finished."""

from __future__ import annotations

from ticktensor.loaders._prefetch import PrefetchStats, Slot, _Shared, host_delivery


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
