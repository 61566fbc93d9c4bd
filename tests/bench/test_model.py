"""The performance model's arithmetic: stage rates, the shared CPU time, the binding stage."""

from __future__ import annotations

import pytest

from ticktensor.bench import Demand, Limits, break_even_step_s, predict, stall_fraction
from ticktensor.errors import ConfigError


def test_memory_only_is_bandwidth_over_sample_bytes() -> None:
    p = predict(Limits(memcpy_gbps=8.0), Demand(sample_bytes=16_000))
    assert p.samples_per_s == pytest.approx(8e9 / 16_000)
    assert p.binding.name == "memory"
    assert [s.name for s in p.stages] == ["memory"]


def test_threaded_memcpy_is_used_when_measured() -> None:
    limits = Limits(memcpy_gbps=8.0, threads=2, memcpy_threads_gbps=12.0)
    p = predict(limits, Demand(sample_bytes=1_000))
    assert p.samples_per_s == pytest.approx(12e6)
    assert "2 threads" in p.binding.limit


def test_decode_and_gather_share_the_threads() -> None:
    limits = Limits(memcpy_gbps=10.0, threads=2, decode_gbps={"zstd": 0.5})
    p = predict(limits, Demand(sample_bytes=1_000, decoded_bytes=1_000, codec="zstd"))
    # per sample: 1000 B / 10 GB/s + 1000 B / (0.5 GB/s x 2) = 0.1 us + 1 us
    assert p.samples_per_s == pytest.approx(1 / 1.1e-6)
    stages = {s.name: s.samples_per_s for s in p.stages}
    assert stages == pytest.approx({"memory": 1e7, "decode": 1e6})
    assert p.binding.name == "decode"
    assert p.verdict(0.78e6) == "decode-bound: 78% of zstd decode rate on 2 threads (0.50 GB/s x 2)"


def test_storage_and_h2d_overlap_with_the_cpu() -> None:
    limits = Limits(memcpy_gbps=10.0, read_gbps=1.0, h2d_gbps=20.0)
    p = predict(limits, Demand(sample_bytes=1_000, read_bytes=500, h2d=True))
    assert p.samples_per_s == pytest.approx(2e6)  # 1 GB/s / 500 B, not added to the copy time
    assert p.binding.name == "storage"
    fast_disk = predict(
        Limits(memcpy_gbps=10.0, read_gbps=100.0, h2d_gbps=2.0),
        Demand(1_000, h2d=True, read_bytes=1),
    )
    assert fast_disk.binding.name == "h2d"
    assert fast_disk.samples_per_s == pytest.approx(2e6)


@pytest.mark.parametrize(
    ("limits", "demand"),
    [
        (Limits(memcpy_gbps=1.0), Demand(1_000, decoded_bytes=10, codec="lz4")),
        (Limits(memcpy_gbps=1.0), Demand(1_000, read_bytes=10)),
        (Limits(memcpy_gbps=1.0), Demand(1_000, h2d=True)),
    ],
)
def test_a_stage_without_a_measured_rate_is_an_error(limits: Limits, demand: Demand) -> None:
    with pytest.raises(ConfigError):
        predict(limits, demand)


def test_invalid_inputs() -> None:
    with pytest.raises(ConfigError, match="memcpy_gbps"):
        Limits(memcpy_gbps=0.0)
    with pytest.raises(ConfigError, match="sample_bytes"):
        Demand(sample_bytes=0)
    with pytest.raises(ConfigError):
        stall_fraction(0.0, 0.001)


def test_stall_fraction_and_break_even() -> None:
    assert stall_fraction(0.004, 0.001) == pytest.approx(0.75)
    assert stall_fraction(0.004, 0.004) == 0.0
    assert stall_fraction(0.001, 0.020) == 0.0
    assert stall_fraction(0.002, 0.0) == 1.0
    assert break_even_step_s(256, 128_000.0) == pytest.approx(0.002)
