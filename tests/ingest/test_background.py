"""Background iteration (read_ahead): order, errors and early exits of the producer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ticktensor.ingest._background import read_ahead


def test_items_come_in_order() -> None:
    assert list(read_ahead(iter(range(1000)), "t")) == list(range(1000))


def test_empty_iterator() -> None:
    assert list(read_ahead(iter([]), "t")) == []


def test_producer_error_is_raised_in_the_consumer_after_earlier_items() -> None:
    def items() -> Iterator[int]:
        yield 1
        raise ValueError("bad block")

    it = read_ahead(items(), "t")
    assert next(it) == 1
    with pytest.raises(ValueError, match="bad block"):
        next(it)


def test_closing_early_stops_the_producer() -> None:
    produced = []

    def items() -> Iterator[int]:
        for i in range(1_000_000):
            produced.append(i)
            yield i

    before = threading.active_count()
    it = read_ahead(items(), "t")
    assert next(it) == 0
    it.close()
    assert threading.active_count() == before  # joined, not left running
    assert len(produced) < 10  # at most the item in hand and one waiting


def test_stopping_after_the_producer_finished_does_not_hang() -> None:
    # The producer has queued the last item and waits to hand over its end mark when the
    # consumer stops (as a strict-mode error on the second-to-last batch does).
    it = read_ahead(iter(range(3)), "t")
    assert next(it) == 0
    assert next(it) == 1
    time.sleep(0.3)  # item 2 queued; the end mark waits for room
    closer = threading.Thread(target=it.close, daemon=True)
    closer.start()
    closer.join(timeout=10)
    assert not closer.is_alive(), "closing the read-ahead hung"


def test_stopping_closes_a_generator_source() -> None:
    closed = threading.Event()

    def items() -> Iterator[int]:
        try:
            yield from range(100)
        finally:
            closed.set()

    it = read_ahead(items(), "t")
    assert next(it) == 0
    it.close()
    assert closed.wait(timeout=10)
