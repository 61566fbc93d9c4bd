"""The one-epoch rows of compressed stores on a tiny workload: every row present, limits
and goals computed from them."""

from __future__ import annotations

from pathlib import Path

from ticktensor.bench import goals
from ticktensor.bench.options import BenchOptions
from ticktensor.bench.passes import compressed_rows
from ticktensor.bench.results import Results
from ticktensor.bench.workload import Workload, prepare
from ticktensor.store import Codec, Store


def test_compressed_rows_hold_the_loader_against_decode_and_first_epoch_limits(
    tmp_path: Path,
) -> None:
    w = Workload(
        symbols=2, rows=4_096, features=4, window=16, batch=32, chunk_rows=1_024, cache_dir=tmp_path
    )
    prepare(w, [Codec.ZSTD, Codec.LZ4], say=lambda _: None)
    stores = {c: Store.open(str(w.store_dir(c))).version() for c in (Codec.ZSTD, Codec.LZ4)}
    results = Results()
    compressed_rows(w, BenchOptions(seconds=0.05, passes=1, threads=2), stores, results, print)
    names = {row.name for row in results.rows}
    for codec in ("zstd", "lz4"):
        assert {
            f"ticktensor_{codec}_block",
            f"{codec}_decode_x_threads",
            f"{codec}_first_epoch_x_threads",
        } <= names
        block = results.row(f"ticktensor_{codec}_block")
        assert block is not None
        assert block.samples_per_s
        assert "cached" in block.note
        first = results.row(f"{codec}_first_epoch_x_threads")
        assert first is not None
        assert first.gb_per_s
        assert first.gb_per_s > 0
    verdicts = {g["goal"]: g["verdict"] for g in goals.check(results.rows)}
    first_epoch_goals = [g for g in verdicts if "first_epoch" in g]
    assert len(first_epoch_goals) == 2
    assert all(verdicts[g] in ("met", "NOT met") for g in first_epoch_goals)
