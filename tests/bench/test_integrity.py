"""The bench rows of the default chunk check: both settings measured, their ratio a goal."""

from __future__ import annotations

from pathlib import Path

from ticktensor.bench.goals import check
from ticktensor.bench.integrity import integrity_rows
from ticktensor.bench.options import BenchOptions
from ticktensor.bench.results import Results
from ticktensor.bench.workload import Workload


def test_check_on_and_off_rows_for_raw_and_zstd_packs(tmp_path: Path) -> None:
    w = Workload(
        symbols=2, rows=3_000, features=4, window=16, batch=32, chunk_rows=512, cache_dir=tmp_path
    )
    results = Results()
    said: list[str] = []
    integrity_rows(w, BenchOptions(passes=1, threads=2), results, said.append)
    rows = {row.name: row for row in results.rows}
    for codec in ("none", "zstd"):
        for name in (f"ticktensor_check_{codec}", f"ticktensor_nocheck_{codec}"):
            assert rows[name].samples_per_s is not None
            assert rows[name].samples_per_s > 0
        assert any(line.startswith(f"#   {codec}: check on") for line in said)
    goals = [g for g in check(results.rows) if "nocheck" in g["goal"]]
    assert len(goals) == 2
    assert all(g["ratio"] is not None for g in goals)
    # Written once: a second run reuses the packs.
    integrity_rows(w, BenchOptions(passes=1, threads=2), Results(), said.append)
    assert sum("writing the benchmark data" in line for line in said) == 2
