"""From rows to verdicts: the model reads its inputs from the limit rows of the same run."""

from __future__ import annotations

import pytest

from ticktensor.bench import BenchOptions, Results, Row, Workload
from ticktensor.bench.verdicts import demand_of, judge, limits_of

W = Workload(symbols=2, rows=1_000, features=4, window=8, batch=4)  # 132 bytes per sample


def _results() -> Results:
    sb = W.sample_bytes
    results = Results()
    results.rows += [
        Row.from_rate("ticktensor", "loader", 1e6, sb, first_batch_s=0.1),
        Row.from_gbps("memcpy", "limit", 2.0, sb),
        Row.from_gbps("memcpy_x_threads", "limit", 4.0, sb),
        Row.from_gbps("zstd_decode_x_threads", "limit", 1.0, sb),
        Row.from_rate("ticktensor_zstd_block", "loader", 3e6, sb),
        Row.from_gbps("seqread_cold", "limit", 0.5, sb),
        Row(
            "ticktensor_cold",
            "loader",
            2e6,
            2e6 * sb / 1e9,
            rss_growth_mb=100.0,
            peak_rss_mb=900.0,
            stats={"cache": {"budget_bytes": 2**20, "hits": 3, "misses": 1}},
        ),
    ]
    return results


def test_limits_come_from_the_limit_rows() -> None:
    limits = limits_of(_results(), threads=2)
    assert limits.memcpy_gbps == pytest.approx(2.0)
    assert limits.memcpy_threads_gbps == pytest.approx(4.0)
    assert limits.decode_gbps == {"zstd": pytest.approx(0.5)}  # the row is x 2 threads
    assert limits.read_gbps == pytest.approx(0.5)
    assert limits.h2d_gbps is None


def test_demands() -> None:
    assert demand_of("ticktensor", W).decoded_bytes == 0  # type: ignore[union-attr]
    zstd = demand_of("ticktensor_zstd_block", W)
    assert zstd is not None
    assert (zstd.decoded_bytes, zstd.codec) == (8 * 16, "zstd")  # a window of 4 float32
    cold = demand_of("ticktensor_cold", W)
    assert cold is not None
    assert cold.read_bytes == 128
    assert demand_of("ticktensor", W, "lz4").decoded_bytes == 16  # type: ignore[union-attr]
    assert demand_of("torch_mmap_w2", W) is None


def test_judge_predicts_and_checks_goals() -> None:
    results = _results()
    judge(W, BenchOptions(threads=2), results, say=lambda _: None)
    model = {m["name"]: m for m in results.model}
    # memory: 4 GB/s / 132 B
    assert model["ticktensor"]["predicted_samples_per_s"] == pytest.approx(4e9 / 132)
    assert model["ticktensor"]["binding"] == "memory"
    # decode and copy share the threads: 132 B / 4 GB/s + 128 B / (0.5 GB/s x 2)
    zstd = model["ticktensor_zstd_block"]
    assert zstd["predicted_samples_per_s"] == pytest.approx(1 / (132 / 4e9 + 128 / 1e9))
    assert zstd["binding"] == "decode"
    assert model["ticktensor_cold"]["binding"] == "storage"
    assert model["ticktensor_cold"]["predicted_samples_per_s"] == pytest.approx(0.5e9 / 128)
    goals = {g["goal"]: g for g in results.goals}
    assert goals["ticktensor_zstd_block / zstd_decode_x_threads (GB/s) >= 0.7x"]["ratio"] == (
        pytest.approx(3e6 * 132 / 1e9 / 1.0)
    )
    assert goals["ticktensor first batch (s) < 0.3"]["verdict"] == "met"
    rss = next(g for g in results.goals if g["goal"].startswith("peak RSS"))
    ring = 5 * 4 * 132
    assert rss["goal"].startswith(
        f"peak RSS growth (MB) of a fresh dataset + loader < {(2**20 + ring) / 2**20 + 200:,.0f}"
    )
    assert rss["verdict"] == "met"
    assert any("hit rate 75.0%" in n for n in results.notes)
