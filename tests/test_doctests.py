"""Every docstring example in the package runs and shows what it says.

Modules are found on disk (every package module whose source has a ``>>>`` prompt), so
a new example is tested without registering it here.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
FOLDERS = {
    "ticktensor": "ticktensor",
    "schemas": "ticktensor.schemas",
    "ingest": "ticktensor.ingest",
    "loaders": "ticktensor.loaders",
    "store": "ticktensor.store",
}


def _modules() -> list[str]:
    names = []
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ">>> " not in path.read_text():
                continue
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join((package, *parts)))
    return names


MODULES = _modules()


def test_examples_were_found() -> None:
    assert len(MODULES) >= 10, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0
    assert result.failed == 0
