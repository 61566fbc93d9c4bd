"""Handoff: items put in any order on several threads are taken in order, then let go."""

from __future__ import annotations

import gc
import random
import threading
import time
import weakref

import pytest

from ticktensor.ingest._handoff import Handoff, HandoffClosedError


class _Item:
    def __init__(self, number: int) -> None:
        self.number = number


def test_items_put_in_any_order_are_taken_in_order() -> None:
    handoff: Handoff[int] = Handoff(200, 200)
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
    handoff: Handoff[str] = Handoff(3, 3)
    handoff.put(0, "a")
    handoff.fail(1, ValueError("block 1 failed"))
    handoff.put(2, "c")
    items = iter(handoff)
    assert next(items) == "a"
    with pytest.raises(ValueError, match="block 1 failed"):
        next(items)


def test_the_handoff_lets_go_of_an_item_once_taken() -> None:
    handoff: Handoff[_Item] = Handoff(2, 2)
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


def test_a_producer_far_ahead_waits_until_the_consumer_catches_up() -> None:
    handoff: Handoff[int] = Handoff(10, 2)
    handoff.put(1, 1)  # within two of the next item: no wait
    done = threading.Event()

    def far() -> None:
        handoff.put(5, 5)  # three ahead of what the consumer can take
        done.set()

    threading.Thread(target=far).start()
    assert not done.wait(0.2)
    items = iter(handoff)
    handoff.put(0, 0)
    assert next(items) == 0
    assert next(items) == 1
    handoff.put(2, 2)
    handoff.put(3, 3)
    assert next(items) == 2
    assert next(items) == 3
    assert done.wait(5)  # 5 is within two of 4 now


def test_closing_lets_waiting_producers_go() -> None:
    handoff: Handoff[int] = Handoff(10, 1)
    done = threading.Event()
    threading.Thread(target=lambda: (handoff.put(3, 3), done.set())).start()
    assert not done.wait(0.1)
    handoff.close()
    assert done.wait(5)


def test_blocks_on_threads_in_order_never_all_wait() -> None:
    """Producers on a pool taking numbers in order, far more items than ``ahead``."""
    from concurrent.futures import ThreadPoolExecutor

    handoff: Handoff[int] = Handoff(300, 3)
    rng = random.Random(1)
    delays = [rng.random() / 2000 for _ in range(300)]

    def produce(n: int) -> None:
        time.sleep(delays[n])
        handoff.put(n, n)

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(produce, n) for n in range(300)]
        assert list(handoff) == list(range(300))
        for f in futures:
            f.result(timeout=10)


def test_a_consumer_waiting_when_the_handoff_closes_raises() -> None:
    handoff: Handoff[int] = Handoff(3, 3)
    handoff.put(0, 0)
    items = iter(handoff)
    assert next(items) == 0
    threading.Timer(0.1, handoff.close).start()
    with pytest.raises(HandoffClosedError, match="before item 1"):
        next(items)
