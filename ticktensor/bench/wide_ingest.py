"""Ingest of one all-symbol CSV of a session, against pyarrow on the same file (W1's ingest row).

The CSV is ``bench ingest``'s generator with a wide universe and one day: trades of every
symbol in time order, as vendors ship them. ``ticktensor ingest``'s job and
``pyarrow.csv.read_csv`` + one zstd Parquet file each run in their own process (after an
untimed warm-up there), taking turns; the median run counts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .ingest import generate, measure
from .wide_append import DATA_AREAS, store_files

__all__ = ["ingest_runs"]

METHODS = ("ticktensor_csv", "pyarrow_csv_parquet")


def ingest_runs(
    work: Path, rows: int, symbols: int, repeats: int, workers: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """Generate the CSV under ``work``, run both methods ``repeats`` times in turns.

    Returns ``{method: {rows, seconds, rows_per_s, mb_per_s, peak_rss_mb, runs_seconds}}``
    (the median run of each) and ``store``: what the last ingest wrote (objects per data
    area, version).
    """
    work.mkdir(parents=True, exist_ok=True)
    csv = work / f"trades-{symbols}x{rows}.csv"
    started = time.perf_counter()
    generate(csv, rows, symbols, days=1)
    say(
        f"# ingest_wide: {rows:,} trades of {symbols:,} symbols in one session "
        f"({csv.stat().st_size / 1e6:,.0f} MB CSV, generated in "
        f"{time.perf_counter() - started:.1f} s); {max(1, repeats)} turn(s), {workers} workers"
    )
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in METHODS}
    for _ in range(max(1, repeats)):
        for method in METHODS:
            runs[method].append(measure(method, csv, work, workers))
    out: dict[str, Any] = {}
    for method, measured in runs.items():
        median = statistics.median_low([float(r["seconds"]) for r in measured])
        row = next(r for r in measured if float(r["seconds"]) == median)
        out[method] = {**row, "runs_seconds": [round(float(r["seconds"]), 3) for r in measured]}
    written = store_files(work / "ticktensor_csv", DATA_AREAS)
    out["store"] = {
        area: sum(1 for k in written if k.split("/", 1)[0] == area) for area in DATA_AREAS
    }
    return out
