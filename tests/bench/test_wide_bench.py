"""``bench wide`` (workload W1): every row in one run, its goals, and its place in ``bench all``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ticktensor.bench import Results, markdown, text, wide_read
from ticktensor.bench.wide import WideOptions
from ticktensor.bench.wide_append import append_packs, session_data
from ticktensor.bench.wide_read import loader_rates, write_narrow
from ticktensor.bench.wide_rows import build_rows, format_rows
from ticktensor.cli import main
from ticktensor.errors import ConfigError
from ticktensor.loaders import WindowDataset

ROWS = [
    "append_session",
    "polars_parquet_session",
    "append_session_segments",
    "objects_per_session",
    "metadata_bytes_per_commit",
    "metadata_bytes_checkpoint",
    "ingest_wide",
    "pyarrow_csv_parquet",
    "open_dataset",
    "loader_wide",
    "loader_narrow",
]
TINY = ["--symbols", "20", "--sessions", "3", "--rows", "50", "--ingest-rows", "2000"]
TINY += ["--seconds", "0.05", "--repeats", "1"]


def test_cli_prints_and_writes_every_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, work = tmp_path / "wide.json", tmp_path / "work"
    work.mkdir()
    argv = ["bench", "wide", *TINY, "--segment-sessions", "2", "--workdir", str(work)]
    assert main([*argv, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["format"] == "ticktensor-bench-wide/1"
    assert doc["meta"]["command"].startswith("ticktensor bench wide --symbols 20")
    assert doc["meta"]["seconds"] > 0
    assert len(doc["meta"]["load_average_after"]) == 3
    assert doc["options"]["symbols"] == 20
    assert doc["options"]["segment_sessions"] == 2
    rows = {r["name"]: r for r in doc["rows"]}
    assert list(rows) == ROWS
    for row in rows.values():
        if row["value"] is None:
            assert row["note"], f"{row['name']} skipped without a reason"
            assert {g["verdict"] for g in row["goals"]} <= {"skipped"}
            continue
        assert math.isfinite(row["value"])
        assert row["value"] > 0, row
        for goal in row["goals"]:
            assert goal["ratio"] > 0
            assert goal["verdict"] in {"pass", "FAIL"}
    for name in [*ROWS[:5], "ingest_wide", "pyarrow_csv_parquet", "loader_narrow"]:
        assert rows[name]["value"] is not None, rows[name]["note"]
    # A pack a session: its group, two objects for each of ts, values, labels, chunk_sha256.
    assert [s["objects"] for s in doc["sessions"]] == [9, 9, 9]
    assert len({s["metadata_bytes"] for s in doc["sessions"]}) == 1
    assert [s["objects"] for s in doc["segment_sessions"]] == [20 * 7, 20 * 7]
    assert rows["objects_per_session"]["goals"][0]["verdict"] == "pass"
    assert rows["metadata_bytes_checkpoint"]["value"] is None  # no 10th commit in 3
    printed = capsys.readouterr().out
    assert "      3 " in printed  # the session table
    assert "append_session / polars_parquet_session <= 2x" in printed
    assert list(work.iterdir()) == []  # the scratch stores are gone


def _doc(append: list[float], checkpoint_at: int = 10) -> dict[str, Any]:
    sessions = [
        {
            "session": k,
            "append_s": a,
            "commit_s": a / 4,
            "polars_parquet_s": 1.0,
            "objects": 9,
            "version_files": 2 if k % checkpoint_at == 0 else 1,
            "metadata_bytes": 20_000 if k % checkpoint_at == 0 else 1_600,
            "checkpoint": k % checkpoint_at == 0,
        }
        for k, a in enumerate(append, 1)
    ]
    ingest = {
        "ticktensor_csv": {"rows": 100, "seconds": 2.0, "rows_per_s": 50.0, "runs_seconds": [2]},
        "pyarrow_csv_parquet": {"rows": 100, "seconds": 1.0, "rows_per_s": 100.0},
        "store": {"packs": 9, "segments": 0, "events": 1},
    }
    reads = {
        "errors": {},
        "open": {"seconds": 1.5, "pairs": 10, "windows": 100, "runs_seconds": [1.5]},
        "loaders": {
            "loader_wide": {"samples_per_s": 90.0, "windows": 100},
            "loader_narrow": {"samples_per_s": 100.0, "windows": 110},
        },
    }
    options = {"symbols": 5, "rows": 20, "features": 2, "labels": 1, "window": 4, "batch": 8}
    return {
        "options": options,
        "sessions": sessions,
        "segment_sessions": [],
        "ingest": ingest,
        "reads": reads,
    }


def _goals(rows: list[dict[str, Any]]) -> dict[str, tuple[float | None, str]]:
    return {g["goal"]: (g["ratio"], g["verdict"]) for r in rows for g in r["goals"]}


def test_goals_are_ratios_of_the_same_run() -> None:
    # Twelve sessions: the age is the median of the last three over the first three.
    append = [1.0, 3.0, 1.1, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 5.0, 1.3, 1.3]
    rows = build_rows(_doc(append))
    goals = _goals(rows)
    assert goals["append_session: sessions 10-12 / 1-3 (medians) <= 1.2x"] == pytest.approx(
        (1.3 / 1.1, "pass")
    )
    assert goals["append_session / polars_parquet_session <= 2x"] == (1.0, "pass")
    assert goals["objects_per_session <= 10"] == (0.9, "pass")
    assert goals["ingest_wide / pyarrow_csv_parquet >= 0.5x"] == (0.5, "pass")
    assert goals["open_dataset <= 1 s"] == (1.5, "FAIL")
    assert goals["loader_wide / loader_narrow >= 0.8x"] == (0.9, "pass")
    by_name = {r["name"]: r for r in rows}
    # The checkpoint commit is its own row; the others are the per-commit figure.
    assert by_name["metadata_bytes_per_commit"]["value"] == 1_600
    assert by_name["metadata_bytes_checkpoint"]["value"] == 20_000
    assert by_name["append_session_segments"]["value"] is None
    table = format_rows(rows)
    assert "open_dataset <= 1 s" in table
    assert "1.50x  FAIL" in table


def test_a_short_run_compares_its_last_session_with_its_first() -> None:
    goals = _goals(build_rows(_doc([1.0, 1.3])))
    assert goals["append_session: session 2 / session 1 <= 1.2x"] == pytest.approx((1.3, "FAIL"))


def test_a_failed_part_skips_its_rows_with_the_reason() -> None:
    doc = _doc([1.0, 1.0])
    doc["reads"]["errors"] = {"open_dataset": "no packs", "loader_wide": "no packs either"}
    del doc["reads"]["open"], doc["reads"]["loaders"]["loader_wide"]
    doc["ingest"] = {"error": "ticktensor_csv failed: no packs"}
    by_name = {r["name"]: r for r in build_rows(doc)}
    assert by_name["pyarrow_csv_parquet"]["value"] is None
    for name in ("open_dataset", "loader_wide", "ingest_wide"):
        assert by_name[name]["value"] is None
        assert "no packs" in by_name[name]["note"]
        assert [g["verdict"] for g in by_name[name]["goals"]] == ["skipped"]


def test_appended_sessions_have_flat_objects_and_metadata(tmp_path: Path) -> None:
    def make(day: int) -> Any:
        return session_data(4, 10, 2, 0, day)

    seen: list[int] = []
    rows = append_packs(tmp_path / "store", 3, make, tmp_path, lambda r: seen.append(r["session"]))
    assert seen == [1, 2, 3]
    assert [r["objects"] for r in rows] == [7] * 3  # no labels array
    assert [r["version_files"] for r in rows] == [1] * 3
    assert all(r["append_s"] >= r["commit_s"] > 0 and r["polars_parquet_s"] > 0 for r in rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # Parquet files removed


def test_the_report_and_results_file_carry_the_wide_rows(tmp_path: Path) -> None:
    doc = _doc([1.0, 1.0])
    results = Results(meta={}, wide={**doc, "rows": build_rows(doc)})
    assert "wide (workload W1):" in text(results)
    assert "| `open_dataset` | 1.500 s | open_dataset <= 1 s | 1.50x | FAIL |" in markdown(results)
    results.write(tmp_path / "r.json")
    assert Results.read(tmp_path / "r.json").wide["rows"] == results.wide["rows"]
    assert "wide" not in text(Results(meta={}))


def test_bench_all_runs_w1_at_its_own_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr("ticktensor.bench.run.execute", lambda *a, **kw: seen.update(kw))
    assert main(["bench", "all", "--quick", "--wide-symbols", "7", "--repeats", "2"]) == 0
    assert seen["wide"] == WideOptions(
        symbols=7, sessions=10, ingest_rows=200_000, segment_sessions=3, seconds=0.5, repeats=2
    )
    assert main(["bench", "loader", "--quick"]) == 0
    assert seen["wide"] is None


def test_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="sessions must be a positive integer, got 0"):
        WideOptions(sessions=0)
    with pytest.raises(ConfigError, match="window 64 is longer than a session's 50 rows"):
        WideOptions(rows=50, window=64)
    with pytest.raises(ConfigError, match="seconds must be > 0"):
        WideOptions(seconds=0)
    assert WideOptions.quick().symbols == 500
    assert WideOptions().symbols * WideOptions().sessions == 100_000


def test_the_loader_rows_start_from_a_loaded_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 2-second repetition over a cold cache measures loading, not shuffled reading:
    # every chunk of the store (a long series of one symbol) is loaded before the first
    # repetition starts, and none while they run.
    narrow = write_narrow(tmp_path / "narrow", lambda day: session_data(20, 2000, 3, 1, day), 5)
    dataset = WindowDataset(narrow, 8, cache_bytes=1 << 30)
    chunks = len(dataset.chunks)
    assert chunks > 4
    assert dataset.cache.stats.loads == 0
    at_start: list[int] = []
    real = wide_read.timed

    def spy(batches: Any, seconds: float) -> Any:
        measure = real(batches, seconds)

        def run(rep: int) -> Any:
            at_start.append(dataset.cache.stats.loads)
            return measure(rep)

        return run

    monkeypatch.setattr(wide_read, "timed", spy)
    loader_rates({"loader_narrow": dataset}, 16, 0.05, 2)
    assert at_start == [chunks, chunks]
    assert dataset.cache.stats.loads == chunks
    assert dataset.cache.complete
