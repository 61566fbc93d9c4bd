"""Static checks as tests: ruff (lint and format) on the tree, clang-format on the C++ core,
mypy --strict on the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE_FOLDERS = {"schemas": "schemas", "ingest": "ingest", "loaders": "loaders", "store": "store"}


def _tool(name: str) -> str:
    exe = Path(sys.executable).parent / name
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; run `make setup` (it installs the dev tools)")
    return found


def _run(*cmd: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, timeout=600)


def test_ruff_lint() -> None:
    result = _run(_tool("ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run(_tool("ruff"), "format", "--check", ".")
    assert result.returncode == 0, "run `ruff format .`:\n" + result.stdout + result.stderr


def test_clang_format() -> None:
    sources = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "native").rglob("*")
        if p.suffix in {".cpp", ".hpp", ".h", ".cc"}
    )
    assert sources, "no C++ sources found under native/"
    result = _run(_tool("clang-format"), "--dry-run", "--Werror", *sources)
    assert result.returncode == 0, "run `clang-format -i` on native/:\n" + result.stderr[-3000:]


@pytest.mark.slow
def test_mypy_strict_on_package(tmp_path: Path) -> None:
    # The package is assembled from several top-level folders at install time; mypy
    # cannot follow the editable-install import hook, so check a symlinked mirror of
    # the installed layout instead.
    pkg = tmp_path / "ticktensor"
    pkg.mkdir()
    for entry in (ROOT / "ticktensor").iterdir():
        if entry.name != "__pycache__" and not entry.name.endswith(".so"):
            os.symlink(entry, pkg / entry.name)
    for name, folder in PACKAGE_FOLDERS.items():
        if (ROOT / folder).is_dir():
            os.symlink(ROOT / folder, pkg / name)
    cache = ROOT / "build" / "mypy-cache"
    result = _run(
        _tool("mypy"),
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(cache),
        str(pkg),
    )
    assert result.returncode == 0, result.stdout + result.stderr
