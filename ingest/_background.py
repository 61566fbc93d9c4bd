"""Background iteration: an iterator's next item is produced on a thread meanwhile."""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import TypeVar, cast

__all__ = ["read_ahead"]

T = TypeVar("T")


def read_ahead(items: Iterator[T], name: str) -> Generator[T, None, None]:
    """Yield ``items``, producing the next one on a thread named ``name`` meanwhile.

    Pays off when both sides release the GIL (file reads, decompression, hashing,
    pyarrow and numpy kernels): on two cores, parsing block ``i + 1`` overlaps with the
    work on block ``i``. One item waits at most (bounded memory). The producer's
    exception is raised here, with its traceback; closing this generator stops the
    producer after its current item.
    """
    done = object()
    slot: queue.Queue[object] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def offer(item: object) -> bool:
        """Hand ``item`` over unless the consumer has stopped; every put goes through here,
        so a consumer that stops while the slot is full never leaves the producer blocked."""
        while not stop.is_set():
            try:
                slot.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
            offer(done)
        except BaseException as exc:  # re-raised in the consumer, with its traceback
            offer(exc)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # a generator source (maybe with a read-ahead of its own) ends here

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while (item := slot.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield cast(T, item)
    finally:
        stop.set()
        thread.join()
