"""``ticktensor bench live`` runs end to end on tiny sizes and reports every figure."""

from __future__ import annotations

from ticktensor.bench.live import LIVE_SPEC, LiveOptions, format_live, run_live


def test_bench_live_reports_latency_throughput_and_baselines() -> None:
    options = LiveOptions(
        latency_quotes=2_000, wide_symbols=5, wide_quotes=200, polars_ticks=3,
        polars_window=200, loop_ticks=500, repeats=1,
    )  # fmt: skip
    doc = run_live(options)
    figures = doc["figures"]
    assert len(LIVE_SPEC.features) == 10
    assert 0 < figures["p50_us"] <= figures["p99_us"] <= figures["p999_us"]
    assert figures["events_per_s"] > 0
    assert figures["vs_polars"] > 1
    assert set(doc["met"]) == {"p50_us", "p99_us", "events_per_s", "vs_polars"}
    text = format_live(doc)
    assert "p99.9" in text
    assert "polars recompute" in text
    assert "numpy incremental" in text
