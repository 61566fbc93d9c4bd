"""benchmarks/gpu_check.py runs on the CPU in --quick mode and marks the GPU rows."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from ticktensor.loaders import WindowDataset
from ticktensor.loaders.dali import dali_available

from .test_dataloader import WINDOW, build_version

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu_check.py"

# The sections that need a GPU, with the modes of their rows in order.
PER_MODE = [
    "CudaDelivery, device=cuda",
    "pinned, user copy",
    "resident, whole store",
    "dali gpu float32",
]
GPU_ROWS = {
    "fences": [
        "pinned, user copy (python)",
        "pinned, user copy (native)",
        "pinned, .to(device) (native)",
        "negative control: no fences",
    ],
    "lagged": [
        "CudaDelivery, device=cuda",
        "dali gpu float32",
        "dali gpu float16",
        "dali gpu bfloat16",
    ],
    "resident": ["whole store, lagging GPU", "8-chunk budget, lagging GPU"],
    "lazy": ["after building GPU loaders", "after unpickling them"],
    "contexts": ["primary contexts (torch)", "GPUs with this pid (smi)"],
    "memory": PER_MODE,
    "compile": PER_MODE,
    "sweep": [f"step {ms} ms, batch {batch}" for batch in (256, 2048) for ms in ("0.25", "1", "5")],
}
NOT_RUN = ("no CUDA", "nvidia-dali not installed", "not checked", "skipped")


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    for check, expected in GPU_ROWS.items():  # every GPU section, its modes in order
        assert [row["mode"] for row in rows if row["check"] == check] == expected, check
    assert rows[0]["check"] == "fences"  # the fence path comes first
    sections = list(dict.fromkeys(row["check"] for row in rows))
    assert sections[:10] == [
        "fences",
        "lagged",
        "resident",
        "pinned",
        "lazy",
        "contexts",
        "memory",
        "compile",
        "sweep",
        "h2d",
    ]
    _assert_nothing_unchecked_passed(rows)
    timed = ["fences", "lagged", "resident", "pinned", "lazy", "memory", "compile", "sweep", "h2d"]
    assert list(report["sections_s"])[: len(timed)] == timed  # "lazy" holds "contexts" too
    assert "# seconds per section:" in done.stdout
    if not report["cuda"]:
        h2d = [row for row in rows if row["check"] == "h2d"]
        assert h2d
        assert all(row["value"] is None and row["note"] == "no CUDA" for row in h2d)
        assert all(row["note"] == "no CUDA" for row in rows if row["check"] == "goal")
        for check in GPU_ROWS:
            found = [row for row in rows if row["check"] == check]
            assert all(row["value"] is None and row["note"] == "no CUDA" for row in found), check
            assert all(row.get("ok") is None for row in found), check
        pinned = [row for row in rows if row["check"] == "pinned"]
        assert [row["mode"] for row in pinned] == [
            "dali cpu float32",
            "dali cpu float16",
            "dali cpu bfloat16",
        ]
        why = "no CUDA" if dali_available() else "nvidia-dali not installed"
        assert all(row["value"] is None and row["note"] == why for row in pinned)
        table = [line.split() for line in done.stdout.splitlines()]
        gpu_lines = [line for line in table if line and line[0] in GPU_ROWS]
        assert len(gpu_lines) == sum(len(m) for m in GPU_ROWS.values())
        assert all(" ".join(line).endswith("no CUDA") for line in gpu_lines)
        assert not any("pass;" in line or "FAIL;" in line for line in done.stdout.splitlines())
    loader = [row for row in rows if row["check"] == "loader"]
    assert all(row["value"] > 0 for row in loader if row["mode"] in modes)


def _assert_nothing_unchecked_passed(rows: list[dict[str, Any]]) -> None:
    """A row passes only with a measured value and a note that does not say it did not run."""
    for row in rows:
        if row.get("ok"):
            assert row["value"] is not None, row
            assert not str(row["note"]).startswith(NOT_RUN), row
        if row["value"] is None and row["check"] in GPU_ROWS:
            assert row.get("ok") is not True, row


def test_rows_print_a_verdict_only_for_checks_that_ran(capsys: pytest.CaptureFixture[str]) -> None:
    check = _gpu_check()
    rows = [
        check._row("lagged", "ran, right", 0.0, "wrong batches", "of 64", ok=True),
        check._row("lagged", "ran, wrong", 3.0, "wrong batches", "of 64", ok=False),
        check._row("compile", "could not run", None, "steps", "skipped: no triton", ok=None),
        check._row("sweep", "a measurement", 1.5, "% stall", "no verdict"),
    ]
    check._print(rows, cuda=False)
    out = capsys.readouterr().out.splitlines()
    printed = {row["mode"]: next(line for line in out if row["mode"] in line) for row in rows}
    assert printed["ran, right"].endswith("pass; of 64")
    assert printed["ran, wrong"].endswith("FAIL; of 64")
    assert printed["could not run"].endswith("skipped: no triton")
    assert printed["a measurement"].endswith("no verdict")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_checksum_sees_one_changed_bit_in_every_dtype(dtype: torch.dtype) -> None:
    check = _gpu_check()
    x = torch.randn(8, 16, 4).to(dtype)
    changed = x.clone()
    bits = changed.view(torch.int32 if dtype == torch.float32 else torch.int16)
    bits[3, 5, 1] ^= 1  # the lowest bit of one value: a rounding, not a different batch
    assert int(check._checksum(x)) != int(check._checksum(changed))
    assert int(check._checksum(x)) == int(check._checksum(x.flip(0)))  # order-free, exact


def test_a_spread_subset_bounds_a_pass_and_reaches_the_last_window(tmp_path: Path) -> None:
    check = _gpu_check()
    dataset = WindowDataset(build_version(tmp_path / "store"), WINDOW)
    spread = check._spread(dataset, 10)
    assert len(spread) == 10
    assert np.array_equal(spread[0][0], dataset[0][0])
    assert np.array_equal(spread[9][0], dataset[len(dataset) - 1][0])
    assert len(check._spread(dataset, 10**9)) == len(dataset)


def test_the_child_process_script_is_valid_python() -> None:
    """It runs only on a GPU; at least it must parse."""
    compile(_gpu_check()._LAZY_CHILD, "<gpu_check child>", "exec")
