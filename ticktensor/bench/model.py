"""A performance model: samples/s from bytes per sample and the measured rates of each stage.

A batch passes through up to four stages. Storage read (when the page cache is cold) and
the host-to-device copy run on the disk and the DMA engine, alongside the CPU; decode and
the window gather (a copy, bounded by memory bandwidth) share the loader's ``threads``.
So, per sample::

    cpu_s   = sample_bytes / memory_rate + decoded_bytes / (decode_rate_1 * threads)
    rate    = min(1 / cpu_s, read_rate / read_bytes, h2d_rate / sample_bytes)

The binding stage is the one with the lowest rate on its own; ``docs/performance.md``
explains the terms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ticktensor.errors import ConfigError

__all__ = [
    "Demand",
    "Limits",
    "Prediction",
    "Stage",
    "break_even_step_s",
    "predict",
    "stall_fraction",
]


@dataclass(frozen=True)
class Limits:
    """Measured rates, in GB/s (``None``: not measured, the stage is left out).

    Parameters
    ----------
    memcpy_gbps
        Copy bandwidth of one thread.
    threads
        Threads the loader decodes and gathers with.
    memcpy_threads_gbps
        Copy bandwidth of ``threads`` threads together (default: ``memcpy_gbps``, the
        conservative choice where it was not measured).
    read_gbps
        Sequential read rate of the storage, page cache cold.
    decode_gbps
        Decoded bytes per second of one thread, per codec name.
    h2d_gbps
        Host-to-device copy rate from pinned memory.
    """

    memcpy_gbps: float
    threads: int = 1
    memcpy_threads_gbps: float | None = None
    read_gbps: float | None = None
    decode_gbps: Mapping[str, float] = field(default_factory=dict)
    h2d_gbps: float | None = None

    def __post_init__(self) -> None:
        if not self.memcpy_gbps > 0:
            raise ConfigError(f"memcpy_gbps: expected > 0, got {self.memcpy_gbps}")
        if self.threads < 1:
            raise ConfigError(f"threads: expected >= 1, got {self.threads}")

    @property
    def memory_gbps(self) -> float:
        """Copy bandwidth available to the loader's threads."""
        return self.memcpy_threads_gbps or self.memcpy_gbps


@dataclass(frozen=True)
class Demand:
    """Bytes one sample costs at each stage.

    Parameters
    ----------
    sample_bytes
        Bytes delivered per sample (the window and its labels): gathered, and copied to
        the device when ``h2d``.
    decoded_bytes
        Bytes decoded per sample (0 for uncompressed or cached data). A chunk-aware
        order over windows with stride ``s`` decodes about ``s`` rows per sample.
    read_bytes
        Bytes read from storage per sample (0 when the page cache holds the data).
    codec
        Codec of the decoded bytes (a key of :attr:`Limits.decode_gbps`).
    h2d
        Whether each batch is copied to an accelerator.
    """

    sample_bytes: float
    decoded_bytes: float = 0.0
    read_bytes: float = 0.0
    codec: str = "none"
    h2d: bool = False

    def __post_init__(self) -> None:
        if not self.sample_bytes > 0:
            raise ConfigError(f"sample_bytes: expected > 0, got {self.sample_bytes}")
        if self.decoded_bytes < 0 or self.read_bytes < 0:
            raise ConfigError("decoded_bytes and read_bytes: expected >= 0")


@dataclass(frozen=True)
class Stage:
    """One stage's rate on its own (samples/s) and the limit it stands for."""

    name: str
    samples_per_s: float
    limit: str


@dataclass(frozen=True)
class Prediction:
    """The predicted rate, every stage's own rate, and the binding stage."""

    samples_per_s: float
    stages: tuple[Stage, ...]

    @property
    def binding(self) -> Stage:
        """The stage with the lowest rate of its own."""
        return min(self.stages, key=lambda s: s.samples_per_s)

    def verdict(self, measured: float) -> str:
        """E.g. ``"decode-bound: 78% of zstd decode rate on 2 threads"``.

        Examples
        --------
        >>> p = predict(Limits(memcpy_gbps=10.0), Demand(sample_bytes=1000.0))
        >>> p.verdict(5e6)
        'memory-bound: 50% of memcpy bandwidth (10.00 GB/s, 1 thread)'
        """
        share = measured / self.binding.samples_per_s
        return f"{self.binding.name}-bound: {share:.0%} of {self.binding.limit}"


def _threads(n: int) -> str:
    return f"{n} thread{'s' if n != 1 else ''}"


def predict(limits: Limits, demand: Demand) -> Prediction:
    """Samples/s the model predicts for ``demand`` on a machine with ``limits``.

    Raises
    ------
    ConfigError
        If a stage has bytes to move but its rate was not measured.

    Examples
    --------
    >>> limits = Limits(memcpy_gbps=8.0, threads=2, decode_gbps={"zstd": 0.8})
    >>> p = predict(limits, Demand(sample_bytes=16_388, decoded_bytes=16_388, codec="zstd"))
    >>> round(p.samples_per_s), p.binding.name
    (81360, 'decode')
    """
    memory = limits.memory_gbps
    mem_threads = limits.threads if limits.memcpy_threads_gbps else 1
    stages = [
        Stage(
            "memory",
            memory * 1e9 / demand.sample_bytes,
            f"memcpy bandwidth ({memory:.2f} GB/s, {_threads(mem_threads)})",
        )
    ]
    cpu_s = demand.sample_bytes / (memory * 1e9)
    if demand.decoded_bytes > 0:
        rate = limits.decode_gbps.get(demand.codec)
        if rate is None:
            raise ConfigError(f"no decode rate measured for codec {demand.codec!r}")
        total = rate * limits.threads
        stages.append(
            Stage(
                "decode",
                total * 1e9 / demand.decoded_bytes,
                f"{demand.codec} decode rate on {_threads(limits.threads)} "
                f"({rate:.2f} GB/s x {limits.threads})",
            )
        )
        cpu_s += demand.decoded_bytes / (total * 1e9)
    predicted = 1.0 / cpu_s
    io = []
    if demand.read_bytes > 0:
        if limits.read_gbps is None:
            raise ConfigError("no storage read rate measured")
        io.append(
            Stage(
                "storage",
                limits.read_gbps * 1e9 / demand.read_bytes,
                f"sequential read rate ({limits.read_gbps:.2f} GB/s)",
            )
        )
    if demand.h2d:
        if limits.h2d_gbps is None:
            raise ConfigError("no host-to-device rate measured")
        io.append(
            Stage(
                "h2d",
                limits.h2d_gbps * 1e9 / demand.sample_bytes,
                f"host-to-device copy rate ({limits.h2d_gbps:.2f} GB/s)",
            )
        )
    stages += io
    predicted = min([predicted, *(s.samples_per_s for s in io)])
    return Prediction(predicted, tuple(stages))


def stall_fraction(batch_s: float, step_s: float) -> float:
    """Share of wall time a consumer waits when batches take ``batch_s`` and steps ``step_s``.

    With the loader running ahead in parallel, the consumer waits ``batch_s - step_s`` per
    step when the loader is slower, else never.

    Examples
    --------
    >>> stall_fraction(0.004, 0.001), stall_fraction(0.001, 0.004)
    (0.75, 0.0)
    """
    if batch_s <= 0 or step_s < 0:
        raise ConfigError(f"expected batch_s > 0 and step_s >= 0, got {batch_s}, {step_s}")
    return max(0.0, batch_s - step_s) / max(batch_s, step_s)


def break_even_step_s(batch: int, samples_per_s: float) -> float:
    """Step time below which a loader of ``samples_per_s`` starts to stall the consumer.

    Examples
    --------
    >>> break_even_step_s(256, 256_000.0)
    0.001
    """
    if samples_per_s <= 0:
        raise ConfigError(f"samples_per_s: expected > 0, got {samples_per_s}")
    return batch / samples_per_s
