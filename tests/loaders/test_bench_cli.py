"""``ticktensor bench loader`` on a tiny workload: it runs, prints ratios and writes valid JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ticktensor.cli import main

NAMES = ["ticktensor", "torch_mmap_w0", "torch_mmap_w2", "numpy_gather", "memcpy"]
KEYS = {"name", "samples_per_s", "gb_per_s", "first_batch_s", "peak_rss_mb"}


def test_bench_loader_writes_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rows.json"
    argv = ["bench", "loader", "--rows", "20000", "--symbols", "2", "--features", "4"]
    argv += ["--seconds", "0.2", "--repeats", "1", "--json", str(out)]
    argv += ["--cache-dir", str(tmp_path / "cache")]
    assert main(argv) == 0
    rows = json.loads(out.read_text())
    names = [row["name"] for row in rows]
    assert set(NAMES) <= set(names)
    assert len(names) == len(set(names))
    for row in rows:
        assert set(row) == KEYS
        assert row["samples_per_s"] > 0
        assert math.isfinite(row["samples_per_s"])
        assert row["gb_per_s"] > 0
        assert row["peak_rss_mb"] > 0
        assert (row["first_batch_s"] is None) == (row["name"] == "memcpy")
    printed = capsys.readouterr().out
    for ratio in ("ticktensor / torch_mmap_w0", "ticktensor / torch_mmap_w2", "/ numpy_gather"):
        assert ratio in printed
    assert "2 symbols x 20,000 rows x 4 float32 features" in printed
    assert (tmp_path / "cache" / "2x20000x4-seed0" / "READY").exists()  # written once


def test_bench_rejects_a_window_longer_than_the_rows(tmp_path: Path) -> None:
    argv = ["bench", "loader", "--rows", "10", "--window", "20", "--cache-dir", str(tmp_path)]
    assert main(argv) == 1  # a ConfigError, reported by the CLI
