"""Handoff in order: items numbered 0..n-1 come in any order, one consumer takes them in order.

A session's blocks are computed on several threads and finish in any order, while its
table and its pack take the blocks' rows in block order. A :class:`Handoff` holds each
item only until the consumer has taken it, so a session's rows are held once, not
once per block in flight plus once per consumer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["Handoff", "HandoffClosedError"]

T = TypeVar("T")


class HandoffClosedError(RuntimeError):
    """The handoff was closed (its producers gave up) before the item the consumer
    waits for came."""


class Handoff(Generic[T]):
    """Items ``0..count-1`` put by producers in any order, taken in order by one consumer.

    A producer that fails puts its exception in place of its item: the consumer raises
    it when it reaches that number. A producer more than ``ahead`` items ahead of the
    consumer waits (the item the consumer waits for never does), so a slow consumer
    holds at most ``ahead`` items; producers taking numbers in order on any number of
    threads cannot all wait. Once the consumer is done (or gave up), :meth:`close` lets
    every waiting producer go and drops what they put; a consumer still waiting then
    raises :class:`HandoffClosedError` (the producers gave up).
    """

    def __init__(self, count: int, ahead: int) -> None:
        self.count = count
        self.ahead = max(1, ahead)
        self._items: dict[int, T] = {}
        self._errors: dict[int, BaseException] = {}
        self._next = 0  # the number the consumer takes next
        self._closed = False
        self._ready = threading.Condition()

    def put(self, number: int, item: T) -> None:
        with self._ready:
            self._ready.wait_for(lambda: self._closed or number < self._next + self.ahead)
            if not self._closed:
                self._items[number] = item
                self._ready.notify_all()

    def fail(self, number: int, error: BaseException) -> None:
        with self._ready:
            self._errors[number] = error
            self._ready.notify_all()

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._items.clear()
            self._ready.notify_all()

    def __iter__(self) -> Iterator[T]:
        """Each item in order, waiting for it; the handoff lets go of it as it is taken."""
        try:
            for number in range(self.count):
                with self._ready:
                    self._ready.wait_for(lambda n=number: self._arrived(n) or self._closed)  # type: ignore[misc]
                    if number in self._errors:
                        raise self._errors.pop(number)
                    if number not in self._items:
                        raise HandoffClosedError(f"closed before item {number} came")
                    item = self._items.pop(number)
                    self._next = number + 1
                    self._ready.notify_all()
                yield item
                del item
        finally:
            self.close()

    def _arrived(self, number: int) -> bool:
        return number in self._items or number in self._errors
