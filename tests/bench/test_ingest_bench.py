"""bench ingest's child: an untimed warm-up on the CSV's first rows, then the timed run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ticktensor.bench.ingest import WARMUP_ROWS, generate


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
