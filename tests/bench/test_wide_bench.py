"""``bench wide``: per-session append figures through the public Store API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ticktensor.bench.wide import WideOptions, format_wide, run_wide
from ticktensor.cli import main
from ticktensor.errors import ConfigError


def test_rows_per_session_with_flat_metadata(tmp_path: Path) -> None:
    options = WideOptions(symbols=4, sessions=3, rows=10, features=2)
    rows = run_wide(options, workdir=tmp_path, say=lambda _: None)
    assert [r["session"] for r in rows] == [1, 2, 3]
    assert [r["objects"] for r in rows] == [4 * 5 + 1] * 3  # 5 files a segment + one entry
    assert len({r["metadata_bytes"] for r in rows}) == 1  # the same entry size each session
    assert all(r["append_s"] > 0 and r["polars_parquet_s"] > 0 for r in rows)
    assert rows[0]["append_vs_session1"] == 1.0
    table = format_wide(rows)
    assert table.splitlines()[0].split()[:3] == ["session", "append", "s"]
    assert len(table.splitlines()) == 4
    assert list(tmp_path.iterdir()) == []  # the scratch store is gone


def test_cli_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "wide.json"
    args = ["bench", "wide", "--symbols", "3", "--sessions", "2", "--rows", "8"]
    assert main([*args, "--features", "2", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["options"] == {"symbols": 3, "sessions": 2, "rows": 8, "features": 2}
    assert [r["session"] for r in doc["rows"]] == [1, 2]
    assert "# session 2 / session 1:" in capsys.readouterr().out


def test_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="sessions must be a positive integer, got 0"):
        WideOptions(sessions=0)
    assert WideOptions.quick() == WideOptions(symbols=500, sessions=10)
