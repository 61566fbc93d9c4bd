"""Package boundaries: no module imports another package's private modules or names.

Each top-level package of ticktensor (``ticktensor.ingest``, ``ticktensor.store``,
``ticktensor.loaders``, ``ticktensor.schemas``, ``ticktensor.cli``, ``ticktensor.bench``,
``ticktensor.train``, ``ticktensor.reliability``) is used from outside only through its
public names. The rule, for an import of a ``ticktensor`` name whose dotted path has a
private component (``ticktensor.store._location``, ``ticktensor.ingest.bars._asof``):

- the package that owns it is the path before the first private component, cut to at
  most ``ticktensor.<package>``: subpackages belong to their package, so
  ``ticktensor.ingest.readers`` may import ``ticktensor.ingest._sources`` and
  ``ticktensor.ingest`` may import ``ticktensor.ingest.readers._columns``;
- only modules inside that package may import it. Private modules of ``ticktensor``
  itself (the native extension ``_native``, ``_memory``) belong to the whole
  distribution; the benchmarks are outside every package.

Every module of the package sources and of ``benchmarks/`` is parsed with :mod:`ast`
(imports inside functions and ``TYPE_CHECKING`` blocks count too). The tests under
``tests/`` are not checked: they may import private modules to test them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
# Source folder -> the dotted name it installs as (pyproject's wheel.packages).
PACKAGES = {
    "ticktensor": "ticktensor",
    "ingest": "ticktensor.ingest",
    "store": "ticktensor.store",
    "loaders": "ticktensor.loaders",
    "schemas": "ticktensor.schemas",
    "benchmarks": "benchmarks",
}


def _module_name(path: Path) -> tuple[str, bool]:
    """The dotted name of the source file ``path`` and whether it is a package."""
    rel = path.relative_to(ROOT)
    parts = [PACKAGES[rel.parts[0]], *rel.parts[1:-1]]
    is_package = path.name == "__init__.py"
    if not is_package:
        parts.append(path.stem)
    return ".".join(parts), is_package


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement reaches (``from a import b`` reaches ``a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        anchor = package[: len(package) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    return [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]


def _owner(target: str) -> str | None:
    """The package owning ``target``'s first private component; None if nothing is private."""
    parts = target.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
            return ".".join(parts[: min(i, 2)])
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(tree: ast.Module, module: str, is_package: bool) -> list[tuple[ast.stmt, str]]:
    """The imports in ``tree`` (of ``module``) reaching another package's private name."""
    found: list[tuple[ast.stmt, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        owners = {
            owner
            for target in _imported(node, module, is_package)
            if target.split(".")[0] == "ticktensor"
            and (owner := _owner(target)) is not None
            and not _inside(module, owner)
        }
        if owners:
            found.append((node, "private to " + ", ".join(sorted(owners))))
    return found


def _sources() -> list[Path]:
    return sorted(p for folder in PACKAGES for p in (ROOT / folder).rglob("*.py"))


def test_sources_are_found() -> None:
    names = {_module_name(p)[0] for p in _sources()}
    for expected in ("ticktensor.cli._ingest", "ticktensor.ingest.readers", "benchmarks.all"):
        assert expected in names


def test_no_package_imports_another_packages_private_modules() -> None:
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [
            f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)} ({why})"
            for node, why in violations(tree, *_module_name(path))
        ]
    assert not found, "import another package's public names instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("importer", "source", "expected"),
    [
        ("ticktensor/cli/_x.py", "from ticktensor.ingest._job import ingest", True),
        ("ticktensor/cli/_x.py", "import ticktensor.store._location", True),
        ("ticktensor/cli/_x.py", "from ticktensor.store import _location", True),
        ("ticktensor/cli/_x.py", "from ticktensor.ingest.bars import _asof", True),
        ("ingest/readers/_x.py", "from ...schemas._conform import cast_columns", True),
        ("benchmarks/_x.py", "from ticktensor._memory import fresh_buffer", True),
        ("ticktensor/cli/_x.py", "from ticktensor.ingest import ingest", False),
        ("ticktensor/cli/_x.py", "from ._format import table", False),
        ("ingest/readers/_x.py", "from ticktensor.ingest._sources import Input", False),
        ("ingest/_x.py", "from ticktensor.ingest.readers._base import Reader", False),
        ("ingest/readers/__init__.py", "from ._base import Reader", False),
        ("loaders/_x.py", "from ticktensor._memory import fresh_buffer", False),
        ("ticktensor/cli/_x.py", "from ticktensor import __version__", False),
        ("ticktensor/cli/_x.py", "import torch._dynamo", False),
    ],
)
def test_the_check_itself(importer: str, source: str, expected: bool) -> None:
    tree = ast.parse(source)
    assert bool(violations(tree, *_module_name(ROOT / importer))) is expected
