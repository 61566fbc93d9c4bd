"""Timing one method: repetitions of a fixed length after the first batch, and peak memory."""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .results import Kind, Row

__all__ = [
    "Rep",
    "RssMonitor",
    "Timing",
    "endless",
    "rss_bytes",
    "summarize",
    "timed",
    "timing_row",
    "warm",
]


@dataclass(frozen=True)
class Rep:
    """One timed repetition: ``samples`` delivered in ``seconds`` (after the first batch)."""

    samples: int
    seconds: float
    first_batch_s: float | None = None
    stats: Mapping[str, Any] = field(default_factory=dict)
    peak_rss: int = 0
    rss_before: int = 0

    @property
    def rate(self) -> float:
        """Samples per second."""
        return self.samples / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Timing:
    """The median of a method's repetitions (``stats`` from the last one)."""

    samples_per_s: float
    first_batch_s: float | None
    peak_rss: int
    rss_growth: int
    stats: Mapping[str, Any]
    rates: tuple[float, ...]


def summarize(reps: list[Rep]) -> Timing:
    """Medians of rate and first batch, the largest peak RSS and RSS growth."""
    firsts = [r.first_batch_s for r in reps if r.first_batch_s is not None]
    return Timing(
        samples_per_s=statistics.median(r.rate for r in reps),
        first_batch_s=statistics.median(firsts) if firsts else None,
        peak_rss=max(r.peak_rss for r in reps),
        rss_growth=max(r.peak_rss - r.rss_before for r in reps),
        stats=reps[-1].stats,
        rates=tuple(r.rate for r in reps),
    )


Batches = Callable[[int], tuple[Iterator[int], Callable[[], Mapping[str, Any]]]]
"""``batches(rep) -> (batch sizes, stats())`` starts one repetition's batch stream."""


def timed(batches: Batches, seconds: float) -> Callable[[int], Rep]:
    """Time ``batches(rep)`` for ``seconds`` after its first batch, under an RSS monitor."""

    def measure(rep: int) -> Rep:
        with RssMonitor() as rss:
            started = time.perf_counter()
            sizes, stats = batches(rep)
            next(sizes)
            first = time.perf_counter() - started
            samples, t0 = 0, time.perf_counter()
            while (now := time.perf_counter()) - t0 < seconds:
                samples += next(sizes)
            figures = dict(stats())
            del sizes
        return Rep(samples, now - t0, first, figures, rss.peak, rss.before)

    return measure


def endless(make: Callable[[], Any]) -> Iterator[int]:
    """Batch sizes of ``make()``'s iterator, starting a new pass at its end."""
    while True:
        iterator = iter(make())
        for batch in iterator:
            yield int(batch[0].shape[0])
        del iterator


class RssMonitor:
    """Peak memory of this process tree while a method runs.

    This process's resident set (``/proc/self/statm``, every 20 ms) plus the private
    memory of its child processes (torch's workers; ``smaps_rollup``, every 200 ms since
    it walks their page tables), so pages a forked worker shares with its parent count
    once. ``before`` is the resident set when the monitor started.
    """

    def __init__(self) -> None:
        self.before = rss_bytes(os.getpid())
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def __enter__(self) -> RssMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        pid, children, tick = os.getpid(), 0, 0
        while True:
            if tick % 10 == 0:
                children = sum(_private_bytes(c) for c in _descendants(pid))
            self.peak = max(self.peak, rss_bytes(pid) + children)
            tick += 1
            if self._stop.wait(0.02):
                return


def rss_bytes(pid: int) -> int:
    """Resident bytes of process ``pid`` (0 where ``/proc`` does not say)."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return found
    return found + [d for c in found for d in _descendants(c)]


def _private_bytes(pid: int) -> int:
    """Private (not shared) resident bytes of ``pid``."""
    total = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


def warm(paths: list[Path]) -> None:
    """Read files once so that the page cache holds them."""
    for path in paths:
        with path.open("rb", buffering=0) as f:
            while f.read(64 << 20):
                pass


def timing_row(name: str, kind: Kind, t: Timing, sample_bytes: int, note: str = "") -> Row:
    """The row of a method's :class:`Timing`."""
    return Row.from_rate(
        name,
        kind,
        t.samples_per_s,
        sample_bytes,
        first_batch_s=t.first_batch_s,
        peak_rss_mb=t.peak_rss / 2**20,
        rss_growth_mb=t.rss_growth / 2**20,
        note=note,
        stats=dict(t.stats),
    )
