"""Rows, ratios, goals and the results file: arithmetic and a JSON round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ticktensor.bench import GOALS, Goal, Results, Row, ratio
from ticktensor.bench.goals import check, ours_for
from ticktensor.errors import ConfigError


def test_rates_and_gigabytes() -> None:
    row = Row.from_rate("ticktensor", "loader", 400_000.0, 16_388)
    assert row.gb_per_s == pytest.approx(400_000 * 16_388 / 1e9)
    limit = Row.from_gbps("memcpy", "limit", 9.0, 16_388)
    assert limit.samples_per_s == pytest.approx(9e9 / 16_388)
    skipped = Row.skipped("spdl", "peer", "not installed")
    assert skipped.samples_per_s is None
    assert skipped.note == "not installed"


def test_ratio() -> None:
    rows = [
        Row("ticktensor", "loader", 400.0, 4.0),
        Row("torch", "baseline", 40.0, 1.0),
        Row.skipped("spdl", "peer", "not installed"),
        Row("zero", "baseline", 0.0, 0.0),
    ]
    assert ratio(rows, "ticktensor", "torch") == pytest.approx(10.0)
    assert ratio(rows, "ticktensor", "torch", "gb_per_s") == pytest.approx(4.0)
    assert ratio(rows, "ticktensor", "spdl") is None
    assert ratio(rows, "ticktensor", "missing") is None
    assert ratio(rows, "ticktensor", "zero") is None


def test_goals_verdicts() -> None:
    rows = [
        Row("ticktensor", "loader", 300.0, 3.0),
        Row("torch_mmap_w2", "baseline", 30.0, 0.3),
        Row("memcpy_x_threads", "limit", 1000.0, 10.0),
    ]
    verdicts = {g["goal"]: (g["ratio"], g["verdict"]) for g in check(rows)}
    assert verdicts["ticktensor / torch_mmap_w2 (samples/s) >= 10x"] == (pytest.approx(10.0), "met")
    assert verdicts["ticktensor / memcpy_x_threads (GB/s) >= 0.5x"] == (
        pytest.approx(0.3),
        "NOT met",
    )
    assert verdicts["ticktensor / threadpool_mmap (samples/s) >= 1.5x"] == (None, "skipped")
    assert len(verdicts) == len(GOALS)
    assert Goal("a", "b", 1.0).evaluate([])["verdict"] == "skipped"


def test_issue_rows_are_compared_with_the_right_loader_row() -> None:
    assert ours_for("torch_zarr_w2") == "ticktensor_zstd_block"
    assert ours_for("lz4_decode_x_threads") == "ticktensor_lz4_block"
    assert ours_for("seqread_cold") == "ticktensor_cold"
    assert ours_for("threadpool_mmap") == "ticktensor"
    names = {g.top for g in GOALS} | {g.bottom for g in GOALS}
    for name in ("ticktensor", "threadpool_mmap", "torch_zarr_w2", "ticktensor_zstd_block"):
        assert name in names
    for name in ("ticktensor_lz4_block", "zstd_decode_x_threads", "lz4_decode_x_threads"):
        assert name in names
    assert {"ticktensor_cold", "seqread_cold"} <= names


def test_results_file_round_trip(tmp_path: Path) -> None:
    results = Results(meta={"command": "ticktensor bench loader"})
    results.rows.append(
        Row("ticktensor", "loader", 1.0, 2.0, 0.1, 3.0, 0.5, "note", {"cache": {"hits": 1}})
    )
    results.stall.append({"name": "ticktensor", "step_ms": 1.0, "stall_pct": 2.0})
    path = tmp_path / "r" / "out.json"
    results.write(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "ticktensor-bench/1"
    assert doc["rows"][0]["name"] == "ticktensor"
    again = Results.read(path)
    assert again == results
    assert again.row("ticktensor") == results.rows[0]
    assert again.row("nope") is None


def test_reading_something_else_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text("[]")
    with pytest.raises(ConfigError, match="not a ticktensor bench results file"):
        Results.read(path)
