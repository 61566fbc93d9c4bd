"""benchmarks/engines.py runs end to end and reports both engines on generated data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "engines.py"


def test_engines_script_reports_both_engines(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--rows",
            "2000",
            "--repeats",
            "1",
            "--seconds",
            "0.2",
            "--hold-ms",
            "0",
            "0.5",
            "--cache-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines() if line[:1] == " "][1:]
    assert [row[0] for row in rows] == ["0", "0.5"]
    for _, python, native, ratio in rows:
        assert float(python.replace(",", "")) > 0
        assert float(native.replace(",", "")) > 0
        assert ratio.endswith("x")
