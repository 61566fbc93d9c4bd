"""Handoff: items put in any order on several threads are taken in order, then let go."""

from __future__ import annotations

import gc
import random
import threading
import weakref

import pytest

from ticktensor.ingest._handoff import Handoff


class _Item:
    def __init__(self, number: int) -> None:
        self.number = number


def test_items_put_in_any_order_are_taken_in_order() -> None:
    handoff: Handoff[int] = Handoff(200)
    numbers = list(range(200))
    random.Random(0).shuffle(numbers)

    def put(part: list[int]) -> None:
        for n in part:
            handoff.put(n, n * 10)

    threads = [threading.Thread(target=put, args=(numbers[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    assert list(handoff) == [n * 10 for n in range(200)]
    for t in threads:
        t.join()


def test_a_failed_item_raises_when_the_consumer_reaches_it() -> None:
    handoff: Handoff[str] = Handoff(3)
    handoff.put(0, "a")
    handoff.fail(1, ValueError("block 1 failed"))
    handoff.put(2, "c")
    items = iter(handoff)
    assert next(items) == "a"
    with pytest.raises(ValueError, match="block 1 failed"):
        next(items)


def test_the_handoff_lets_go_of_an_item_once_taken() -> None:
    handoff: Handoff[_Item] = Handoff(2)
    first = _Item(0)
    gone = weakref.ref(first)
    handoff.put(0, first)
    handoff.put(1, _Item(1))
    del first
    items = iter(handoff)
    assert next(items).number == 0
    assert next(items).number == 1  # the consumer has moved on from item 0
    gc.collect()
    assert gone() is None
