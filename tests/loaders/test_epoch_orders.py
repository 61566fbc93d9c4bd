"""Epoch orders computed ahead: closing them from the order thread itself."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ticktensor.loaders._orders import EpochOrders


def test_close_on_an_order_thread_does_not_wait_for_itself() -> None:
    # The cyclic collector runs a dropped loader's finalizer (which closes its orders) on
    # whichever thread allocates: an order thread among them.
    class ClosingOrder:
        def order(self, dataset: Any, epoch: int) -> np.ndarray:
            deadline = time.monotonic() + 10
            while threading.current_thread() not in list(orders._running.values()):
                assert time.monotonic() < deadline, "the order thread was never registered"
                time.sleep(0.001)
            orders.close()
            return np.arange(4, dtype=np.int64)

    orders = EpochOrders(ClosingOrder(), dataset=None)  # type: ignore[arg-type]
    orders.prefetch(0)
    thread = orders._running[0]
    thread.join(timeout=10)
    assert not thread.is_alive()
    np.testing.assert_array_equal(orders.get(0), np.arange(4))  # not the join's error
