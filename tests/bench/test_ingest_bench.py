"""bench ingest's child: an untimed warm-up on the CSV's first rows, then the timed run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ticktensor.bench.ingest import WARMUP_ROWS, generate, run_ingest
from ticktensor.bench.results import Results
from ticktensor.errors import TickTensorError


@pytest.mark.parametrize("method", ["ticktensor_csv", "pyarrow_csv_parquet"])
def test_child_warms_up_then_converts_the_whole_csv(tmp_path: Path, method: str) -> None:
    csv = tmp_path / "trades.csv"
    generate(csv, rows=3 * WARMUP_ROWS, symbols=2, days=1)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "ticktensor.bench.ingest", "--child", method]
    result = subprocess.run(
        [*command, "--csv", str(csv), "--out", str(out), "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["rows"] == 3 * WARMUP_ROWS  # the timed run saw every row, not the head
    assert report["seconds"] > 0
    assert any(out.rglob("*.parquet"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "trades.csv"]  # no leftovers


def test_baselines_can_be_left_out_and_unknown_ones_are_refused(tmp_path: Path) -> None:
    results = Results(meta={})
    run_ingest(2 * WARMUP_ROWS, results, baselines=(), work=tmp_path, repeats=1, say=print)
    assert [row["name"] for row in results.ingest] == ["ticktensor_csv"]
    assert results.ingest[0]["rows"] == 2 * WARMUP_ROWS
    with pytest.raises(TickTensorError, match="unknown \\['polars'\\]"):
        run_ingest(2 * WARMUP_ROWS, Results(meta={}), baselines=("polars",), work=tmp_path)
