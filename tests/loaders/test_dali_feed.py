"""DALI's external source holds the arrays it fed until DALI can no longer read them.

DALI reads a fed array later (``no_copy``), while it runs ahead of the consumer: the
array is a view of a ring slot, so the feed holds the last ``held_batches`` of them, and
their slots count as in use (not refillable) until newer batches push them out.
"""

from __future__ import annotations

import gc
from typing import Any

from ticktensor.loaders._dali_pipeline import _Feed
from ticktensor.loaders._prefetch import Slot, host_delivery


class Slots:
    """A batch source over ``slots``, one batch per slot, as the prefetcher hands them."""

    def __init__(self, slots: list[Slot]) -> None:
        self.slots, self.step = slots, 0

    def __next__(self) -> tuple[Any, ...]:
        if self.step == len(self.slots):
            raise StopIteration
        x, y, _ = host_delivery(self.slots[self.step], 2)
        self.step += 1
        return self.step - 1, 2, x, y, None

    def close(self) -> None:
        pass


def test_the_last_fed_batches_keep_their_slots_in_use() -> None:
    slots = [Slot((2, 3, 1), (2, 1), pin=False) for _ in range(6)]
    feed = _Feed(3)
    feed.point_at(Slots(slots))  # type: ignore[arg-type]
    for _ in range(6):
        feed()  # DALI takes the arrays; the feed keeps the last three
    gc.collect()
    assert [slot.is_free() for slot in slots] == [True, True, True, False, False, False]
    assert list(feed.fed) == [(step, 2) for step in range(6)]
