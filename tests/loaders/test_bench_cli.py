"""``ticktensor bench`` on a tiny workload: every row filled or skipped with a reason, valid files.

One run of ``bench all`` (the CLI end to end: loader, train, sweeps, ingest, JSON, plot,
Markdown), then ``bench report`` on its file. Timings are not checked, only that the
figures are there and consistent; the arithmetic is tested in ``tests/bench``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ticktensor.cli import main

ISSUE_ROWS = [
    "ticktensor",
    "torch_mmap_w0",
    "torch_mmap_w2",
    "numpy_gather",
    "memcpy",
    "threadpool_mmap",
    "torch_zarr_w2",
    "ticktensor_zstd_block",
    "ticktensor_lz4_block",
    "zstd_decode_x_threads",
    "lz4_decode_x_threads",
    "ticktensor_cold",
    "seqread_cold",
]
KEYS = {"name", "samples_per_s", "gb_per_s", "first_batch_s", "peak_rss_mb"}


@pytest.mark.slow
def test_bench_all_fills_every_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "results.json", tmp_path / "plot.png"
    argv = ["bench", "all", "--quick", "--rows", "3000", "--symbols", "2", "--features", "4"]
    argv += ["--window", "16", "--batch", "32", "--chunk-rows", "512", "--seconds", "0.05"]
    argv += [
        "--repeats",
        "1",
        "--thread-counts",
        "1",
        "2",
        "--step-ms",
        "1",
        "--ingest-rows",
        "2000",
        *("--wide-symbols", "20", "--wide-sessions", "3", "--wide-rows", "50"),
        *("--wide-ingest-rows", "2000"),
    ]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--json", str(out), "--plot", str(png)]
    argv += ["--markdown"]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["format"] == "ticktensor-bench/1"
    assert doc["meta"]["command"].startswith("ticktensor bench all --")
    assert " --quick" in doc["meta"]["command"]
    assert {"machine", "versions", "git", "date", "workload", "options"} <= set(doc["meta"])
    assert doc["meta"]["machine"]["cores"] >= 1
    rows = {row["name"]: row for row in doc["rows"]}
    assert len(rows) == len(doc["rows"])
    assert set(ISSUE_ROWS) <= set(rows)
    for row in rows.values():
        assert set(row) >= KEYS
        if row["samples_per_s"] is None:
            assert row["note"], f"{row['name']} skipped without a reason"
            continue
        assert row["samples_per_s"] > 0
        assert math.isfinite(row["gb_per_s"])
        assert row["gb_per_s"] > 0
    for name in ISSUE_ROWS:
        assert rows[name]["samples_per_s"] is not None, f"{name}: {rows[name]['note']}"
    assert {g["verdict"] for g in doc["goals"]} <= {"met", "NOT met"}
    assert {m["name"] for m in doc["model"]} >= {
        "ticktensor",
        "ticktensor_zstd_block",
        "ticktensor_lz4_block",
        "ticktensor_cold",
    }
    assert [t["threads"] for t in doc["threads"]] == [1, 2]
    assert {(s["name"], s["step_ms"]) for s in doc["stall"]} == {
        ("ticktensor", 1.0),
        ("torch_mmap_w2", 1.0),
    }
    assert set(doc["sweeps"]) == {"batch", "window", "rows", "codec"}
    assert [r["name"] for r in doc["ingest"]] == [
        "ticktensor_csv",
        "pyarrow_csv_parquet",
        "pandas_zarr",
    ]
    assert png.stat().st_size > 0
    printed = capsys.readouterr().out
    assert "2 series x 3,000 rows x 4 float32 features" in printed
    assert "| `torch_zarr_w2` | baseline |" in printed  # --markdown
    assert "goals (ratios from this run):" in printed
    assert "-bound: " in printed  # the model names the binding limit

    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- bench:begin old.json -->\nold\n<!-- bench:end -->\n")
    assert main(["bench", "report", str(out), "--readme", str(readme)]) == 0
    assert f"<!-- bench:begin {out} -->" in readme.read_text()
    assert "| `ticktensor` | loader |" in readme.read_text()


def test_bench_rejects_a_window_longer_than_the_rows(tmp_path: Path) -> None:
    argv = ["bench", "loader", "--rows", "10", "--window", "20", "--cache-dir", str(tmp_path)]
    assert main(argv) == 1  # a ConfigError, reported by the CLI


def test_bench_report_refuses_other_files(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text("[]")
    assert main(["bench", "report", str(path)]) == 1


@pytest.mark.parametrize("part", [[], ["loader"], ["ingest"], ["train"], ["all"], ["report"]])
def test_bench_help(part: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", *part, "--help"])
    assert exited.value.code == 0
    assert "usage: ticktensor bench" in capsys.readouterr().out
