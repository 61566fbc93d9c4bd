"""From measured rows to verdicts: the model's inputs and predictions, goals, engine notes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ticktensor.errors import ConfigError

from . import goals
from .engine import cache_budget_bytes, cache_hit_rate, new_stats
from .model import Demand, Limits, predict
from .options import BenchOptions
from .results import Results
from .workload import Workload

__all__ = ["demand_of", "judge", "limits_of", "stage_shares"]

Say = Callable[[str], None]


def judge(w: Workload, o: BenchOptions, results: Results, say: Say) -> None:
    """Fill ``results.model`` and ``results.goals``; note engine figures the bench does not know."""
    _model(w, o, results)
    results.goals.extend(goals.check(results.rows))
    _rss_and_first_batch(w, results)
    _engine_stats(results, say)


def limits_of(results: Results, threads: int) -> Limits:
    """The model's inputs, from the limit rows of ``results``."""

    def gbps(name: str) -> float | None:
        row = results.row(name)
        return None if row is None else row.gb_per_s

    decode = {}
    for codec in ("zstd", "lz4"):
        row = results.row(f"{codec}_decode_x_threads")
        if row is not None and row.gb_per_s is not None:
            decode[codec] = row.gb_per_s / threads
    return Limits(
        memcpy_gbps=gbps("memcpy") or 1.0,
        threads=threads,
        memcpy_threads_gbps=gbps("memcpy_x_threads"),
        read_gbps=gbps("seqread_cold"),
        decode_gbps=decode,
        h2d_gbps=gbps("h2d"),
    )


def demand_of(name: str, w: Workload, codec: str = "none") -> Demand | None:
    """Bytes per sample at each stage for the loader rows of ``bench loader``.

    The main rows (``ticktensor``, ``ticktensor_cuda``) read the ``codec`` store with
    stride 1: a chunk-aware order decodes about one row per sample there.
    """
    sb = w.sample_bytes
    if name in ("ticktensor", "ticktensor_cuda"):
        decoded = 0 if codec == "none" else w.row_bytes
        return Demand(sb, decoded_bytes=decoded, codec=codec, h2d=name == "ticktensor_cuda")
    if name in ("ticktensor_zstd_block", "ticktensor_lz4_block"):
        return Demand(
            sample_bytes=sb, decoded_bytes=w.window * w.row_bytes, codec=name.split("_")[1]
        )
    if name == "ticktensor_cold":
        return Demand(sample_bytes=sb, read_bytes=w.window * w.row_bytes)
    return None


def _model(w: Workload, o: BenchOptions, results: Results) -> None:
    limits = limits_of(results, o.threads)
    for row in results.rows:
        demand = demand_of(row.name, w, o.codec.value)
        if demand is None or row.samples_per_s is None:
            continue
        try:
            p = predict(limits, demand)
        except ConfigError as exc:
            results.notes.append(f"model: no prediction for {row.name}: {exc}")
            continue
        results.model.append(
            {
                "name": row.name,
                "predicted_samples_per_s": p.samples_per_s,
                "measured_samples_per_s": row.samples_per_s,
                "measured_over_predicted": row.samples_per_s / p.samples_per_s,
                "binding": p.binding.name,
                "verdict": p.verdict(row.samples_per_s),
                "stages": {s.name: s.samples_per_s for s in p.stages},
            }
        )


def _rss_and_first_batch(w: Workload, results: Results) -> None:
    """Goals: first batch < 0.3 s; RSS growth of a fresh loader < cache budget + ring + 200 MB."""
    tt = results.row("ticktensor")
    if tt is not None and tt.first_batch_s is not None:
        results.goals.append(
            {
                "goal": "ticktensor first batch (s) < 0.3",
                "ratio": tt.first_batch_s,
                "verdict": "met" if tt.first_batch_s < 0.3 else "NOT met",
                "value": tt.first_batch_s,
            }
        )
    cold = results.row("ticktensor_cold")
    if cold is None or cold.peak_rss_mb is None:
        return
    stats = cold.stats
    budget = cache_budget_bytes(stats)
    what = "cache budget from stats()"
    if budget is None:
        budget = float(w.symbols * w.rows * (w.row_bytes + 4 + 8))  # series, labels, ts in RAM
        what = (
            "no cache budget in stats(): the engine holds the series in RAM, counted as its cache"
        )
    ring = 5 * w.batch * w.sample_bytes  # prefetch 2 + 3 buffers
    limit_mb = (budget + ring) / 2**20 + 200
    growth = cold.rss_growth_mb if cold.rss_growth_mb is not None else cold.peak_rss_mb
    results.goals.append(
        {
            "goal": f"peak RSS growth (MB) of a fresh dataset + loader < {limit_mb:,.0f} "
            "(cache budget + ring + 200 MB)",
            "ratio": growth,
            "verdict": "met" if growth < limit_mb else "NOT met",
            "value": growth,
            "note": f"{growth:,.0f} MB vs {limit_mb:,.0f} MB ({what})",
        }
    )


def _engine_stats(results: Results, say: Say) -> None:
    """Notes from the loader rows' ``stats()``: cache hit rate, where the time went, new keys."""
    new: set[str] = set()
    for row in results.rows:
        if row.kind != "loader" or not row.stats:
            continue
        parts = []
        rate = cache_hit_rate(row.stats)
        if rate is not None:
            parts.append(f"chunk cache hit rate {rate:.1%}")
        stages = stage_shares(row.stats)
        if stages:
            shown = ", ".join(f"{name} {share:.0%}" for name, share in stages.items())
            parts.append(f"stage seconds / wall: {shown}")
        if parts:
            results.notes.append(f"{row.name}: {'; '.join(parts)}")
        new |= {key.split(".")[0] + (".*" if "." in key else "") for key in new_stats(row.stats)}
    if new:
        results.notes.append(
            f"stats() keys new to the bench, kept in the rows' stats: {', '.join(sorted(new))}"
        )
    say("# done")


def stage_shares(stats: Mapping[str, Any]) -> dict[str, float]:
    """Seconds per stage (a ``stage_s`` section of ``stats()``) over the wall time, largest first.

    Stages summed over threads can add up to more than 100%.

    Examples
    --------
    >>> stage_shares({"wall_s": 2.0, "stage_s": {"decode": 1.0, "fetch": 0.5}})
    {'decode': 0.5, 'fetch': 0.25}
    """
    wall = stats.get("wall_s")
    stages = stats.get("stage_s")
    if not isinstance(wall, int | float) or wall <= 0 or not isinstance(stages, Mapping):
        return {}
    shares = {
        str(name): float(seconds) / wall
        for name, seconds in stages.items()
        if isinstance(seconds, int | float)
    }
    return dict(sorted(shares.items(), key=lambda item: -item[1]))
