"""Data stall under a simulated accelerator: a consumer that takes a fixed step per batch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Accelerator", "StallRow", "measure_stall"]


class Accelerator:
    """A training step that takes ``step_s`` seconds without using the CPU.

    Without CUDA the step is a ``time.sleep``. With CUDA it is a GPU kernel
    (``torch.cuda._sleep``, calibrated once against the clock) that the consumer waits on
    through an event created with ``blocking=True``, so the waiting thread sleeps instead
    of spinning.
    """

    def __init__(self, *, cuda: bool | None = None) -> None:
        import torch

        self.cuda = torch.cuda.is_available() if cuda is None else cuda
        self._cycles_per_s = self._calibrate() if self.cuda else 0.0

    @property
    def kind(self) -> str:
        """``"cuda kernel"`` or ``"sleep"``."""
        return "cuda kernel" if self.cuda else "sleep"

    def _calibrate(self) -> float:

        cycles = 10_000_000
        self._spin(cycles)  # warm up
        started = time.perf_counter()
        self._spin(cycles)
        return cycles / (time.perf_counter() - started)

    def _spin(self, cycles: int) -> None:
        import torch

        done = torch.cuda.Event(blocking=True)  # type: ignore[no-untyped-call]
        torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]
        done.record()
        done.synchronize()

    def step(self, step_s: float) -> None:
        """Spend ``step_s`` seconds on the device (or asleep) without using the CPU."""
        if self.cuda:
            self._spin(int(step_s * self._cycles_per_s))
        else:
            time.sleep(step_s)


@dataclass(frozen=True)
class StallRow:
    """One loader at one step time: the share of wall time spent waiting for data."""

    name: str
    step_ms: float
    batches: int
    wait_s: float
    wall_s: float
    first_batch_s: float

    @property
    def stall_pct(self) -> float:
        """Data stall: time waiting for the next batch / wall time, in percent."""
        return 100.0 * self.wait_s / self.wall_s if self.wall_s > 0 else 0.0


def measure_stall(
    name: str,
    make: Callable[[], Iterable[Any]],
    step_s: float,
    seconds: float,
    accelerator: Accelerator,
    *,
    min_batches: int = 3,
) -> StallRow:
    """Run ``make()``'s batches through ``accelerator`` steps for about ``seconds``.

    The first batch is waited for but not counted (it measures start-up, reported apart);
    the clock then runs until ``seconds`` have passed and at least ``min_batches`` steps
    were taken.
    """
    started = time.perf_counter()
    batches: Iterator[Any] = _cycle(make)
    next(batches)
    first = time.perf_counter() - started
    wait = 0.0
    count = 0
    t0 = time.perf_counter()
    while True:
        asked = time.perf_counter()
        next(batches)
        wait += time.perf_counter() - asked
        accelerator.step(step_s)
        count += 1
        if count >= min_batches and time.perf_counter() - t0 >= seconds:
            break
    wall = time.perf_counter() - t0
    del batches
    return StallRow(name, step_s * 1e3, count, wait, wall, first)


def _cycle(make: Callable[[], Iterable[Any]]) -> Iterator[Any]:
    while True:
        yield from make()
