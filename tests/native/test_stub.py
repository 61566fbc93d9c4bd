"""The committed ticktensor/_native.pyi matches what nanobind's stubgen generates now."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

STUB = Path(__file__).resolve().parents[2] / "ticktensor" / "_native.pyi"
REFRESH = (
    "python -m nanobind.stubgen -m ticktensor._native -o ticktensor/_native.pyi"
    " && ruff format ticktensor/_native.pyi && ruff check --fix ticktensor/_native.pyi"
)


def test_committed_stub_is_fresh(tmp_path: Path) -> None:
    fresh = tmp_path / "_native.pyi"
    command = [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "ticktensor._native"]
    subprocess.run([*command, "-o", str(fresh)], check=True)
    # Compare syntax trees: the committed stub is ruff-formatted, stubgen's output is not.
    committed_tree = ast.dump(ast.parse(STUB.read_text(encoding="utf-8")))
    fresh_tree = ast.dump(ast.parse(fresh.read_text(encoding="utf-8")))
    assert committed_tree == fresh_tree, (
        f"{STUB} is stale: the extension's signatures or docstrings changed. "
        f"Rebuild the package, then run from the repository root: {REFRESH}"
    )
