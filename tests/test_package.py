"""Packaging: one ``ticktensor`` package, sorted public ``__all__``, no bare top-level modules."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ticktensor

ROOT = Path(__file__).parents[1]
PUBLIC_MODULES = [
    "ticktensor.errors",
    "ticktensor.kernels",
    "ticktensor.schemas",
    "ticktensor.store",
    "ticktensor.store.testing",
    "ticktensor.ingest",
    "ticktensor.ingest.readers",
    "ticktensor.loaders",
    "ticktensor.loaders.batch_source",
    "ticktensor.loaders.dali",
    "ticktensor.cli",
    "ticktensor.train",
]
BARE = ("schemas", "ingest", "loaders", "store")


def test_native_extension_imports() -> None:
    native = importlib.import_module("ticktensor._native")
    assert Path(native.__file__).name.startswith("_native")
    assert ticktensor.__version__


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    # isort-style order, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions.
    order = sorted(exported, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))
    assert exported == order, f"{name}.__all__ is not sorted"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names missing attributes: {missing}"


def test_no_bare_imports_of_package_folders() -> None:
    pattern = re.compile(rf"^\s*(from|import)\s+({'|'.join(BARE)})(\.|\s|$)", re.M)
    offenders = []
    for folder in ("ticktensor", *BARE, "tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            offenders.extend(
                f"{path.relative_to(ROOT)}: {m.group(0).strip()}"
                for m in pattern.finditer(path.read_text())
            )
    assert not offenders, "import ticktensor.<name>, never the bare folder:\n" + "\n".join(
        offenders
    )


@pytest.mark.slow
def test_wheel_holds_only_the_ticktensor_package(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (wheel,) = tmp_path.glob("ticktensor-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"ticktensor", next(t for t in tops if t.endswith(".dist-info"))}, tops
    for required in (
        "ticktensor/py.typed",
        "ticktensor/_native.pyi",
        "ticktensor/store/__init__.py",
        "ticktensor/schemas/__init__.py",
        "ticktensor/ingest/__init__.py",
        "ticktensor/errors.py",
    ):
        assert required in names, f"{required} missing from the wheel"
    assert any(re.match(r"ticktensor/_native\..*\.so$", n) for n in names)
