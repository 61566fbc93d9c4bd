"""benchmarks/gpu_check.py runs on the CPU in --quick mode and marks the GPU rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ticktensor.loaders.dali import dali_available

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu_check.py"


@pytest.mark.slow
def test_quick_check_runs_without_a_gpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    args = ["--quick", "--seconds", "0.1", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    rows = report["rows"]
    checks = {(row["check"], row["mode"]) for row in rows}
    modes = ["host-pinned", "device-resident"] + (["dali"] if dali_available() else [])
    for mode in modes:
        assert ("loader", mode) in checks
        assert ("stall", mode) in checks
    assert ("stall", "torch DataLoader") in checks
    traffic = {row["mode"]: row["value"] for row in rows if row["check"] == "traffic"}
    assert 0 < traffic["device-resident"] < traffic["host-pinned / dali"]
    correct = [row for row in rows if row["check"] == "correct"]
    assert correct
    assert all(row["value"] == 1.0 for row in correct), correct
    if not report["cuda"]:
        h2d = [row for row in rows if row["check"] == "h2d"]
        assert h2d
        assert all(row["value"] is None and row["note"] == "no CUDA" for row in h2d)
        assert all(row["note"] == "no CUDA" for row in rows if row["check"] == "goal")
        fences = [row for row in rows if row["check"] == "fences"]
        assert len(fences) == 3
        assert all(row["value"] is None and row["note"] == "no CUDA" for row in fences)
        assert rows[0]["check"] == "fences"  # the fence path comes first
        resident = [row for row in rows if row["check"] == "resident"]
        assert len(resident) == 2
        assert all(row["value"] is None and row["note"] == "no CUDA" for row in resident)
        pinned = [row for row in rows if row["check"] == "pinned"]
        assert [row["mode"] for row in pinned] == [
            "dali cpu float32",
            "dali cpu float16",
            "dali cpu bfloat16",
        ]
        why = "no CUDA" if dali_available() else "nvidia-dali not installed"
        assert all(row["value"] is None and row["note"] == why for row in pinned)
        assert "no CUDA" in done.stdout
    loader = [row for row in rows if row["check"] == "loader"]
    assert all(row["value"] > 0 for row in loader if row["mode"] in modes)
