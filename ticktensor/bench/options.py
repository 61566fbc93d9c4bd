"""How long and how wide a benchmark run measures (the workload's shape is :class:`Workload`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from ticktensor.errors import ConfigError
from ticktensor.store import Codec

__all__ = ["BenchOptions", "default_thread_counts"]

OrderKind = Literal["uniform", "block"]


def default_thread_counts(cores: int | None = None) -> tuple[int, ...]:
    """1, 2, 4 ... up to the core count, and the core count itself.

    Examples
    --------
    >>> default_thread_counts(2), default_thread_counts(12)
    ((1, 2), (1, 2, 4, 8, 12))
    """
    cores = max(1, cores or os.cpu_count() or 1)
    counts = {1, cores}
    n = 2
    while n < cores:
        counts.add(n)
        n *= 2
    return tuple(sorted(counts))


@dataclass(frozen=True)
class BenchOptions:
    """Timing and scope of a run.

    Parameters
    ----------
    seconds
        Length of one timed repetition, after the method's first batch.
    repeats
        Repetitions per method (methods take turns); the median counts.
    passes
        Repetitions of the one-epoch measurements (compressed and cold stores).
    threads
        Threads of the loader and of the ``x threads`` limits (default: the core count).
    thread_counts
        Thread counts of the scaling table (default: 1, 2, 4 ... cores).
    codec
        Codec of the store behind the main ``ticktensor`` row.
    order
        Order of the main ``ticktensor`` row.
    step_ms
        Step times of the simulated accelerator (``bench train``).
    memcpy_mib
        Buffer size of the memcpy limit.
    quick
        Shorter sweeps (``bench all --quick``).
    """

    seconds: float = 2.0
    repeats: int = 5
    passes: int = 2
    threads: int = 0
    thread_counts: tuple[int, ...] = ()
    codec: Codec = Codec.NONE
    order: OrderKind = "uniform"
    step_ms: tuple[float, ...] = (1.0, 5.0, 20.0)
    memcpy_mib: int = 256
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ConfigError(f"seconds: expected > 0, got {self.seconds}")
        for name in ("repeats", "passes", "memcpy_mib"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if self.threads < 0 or any(t < 1 for t in self.thread_counts):
            raise ConfigError("threads: expected >= 1")
        if self.order not in ("uniform", "block"):
            raise ConfigError(f"order: expected uniform or block, got {self.order!r}")
        if any(s < 0 for s in self.step_ms):
            raise ConfigError(f"step_ms: expected >= 0, got {self.step_ms}")
        try:
            object.__setattr__(self, "codec", Codec(self.codec))
        except ValueError:
            raise ConfigError(
                f"codec {self.codec!r} is not one of: none, lz4, zstd, blosc"
            ) from None
        if self.threads == 0:
            object.__setattr__(self, "threads", os.cpu_count() or 1)
        if not self.thread_counts:
            object.__setattr__(self, "thread_counts", default_thread_counts())
