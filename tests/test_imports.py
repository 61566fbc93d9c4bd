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
from collections.abc import Callable
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


#: What the loaders never see of the store's codecs: their tags and the readers' names
#: for chunk kinds (as string values), the codec attribute of a chunk, the codec modules.
CODEC_WORDS = frozenset({"raw", "zstd", "lz4", "blosc", "fill"})
CODEC_ATTRIBUTES = frozenset({"codec", "chunk_codec"})
CODEC_MODULES = ("ticktensor.store.codecs", "numcodecs", "zstandard", "blosc", "lz4")
CODEC_NAMES = frozenset({"Codec", "ChunkCodec", "codec_for", "codec_of_chain", "check_frame"})


def _import_of(node: ast.Import | ast.ImportFrom) -> tuple[list[str], set[str]]:
    """The modules an import statement names, and the names it imports."""
    modules = (
        [alias.name for alias in node.names]
        if isinstance(node, ast.Import)
        else [node.module or ""]
    )
    return modules, {alias.name for alias in node.names}


def _within(modules: list[str], packages: tuple[str, ...]) -> bool:
    """Whether one of ``modules`` is one of ``packages`` or inside one."""
    return any(m == p or m.startswith(p + ".") for m in modules for p in packages)


def _loaders_findings(check: Callable[[ast.AST], list[tuple[int, str]]]) -> list[str]:
    """``check``'s findings in every module of ``loaders/``, as ``path:line: what``."""
    return [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sorted((ROOT / "loaders").rglob("*.py"))
        for line, what in check(ast.parse(path.read_text(), filename=str(path)))
    ]


def codec_knowledge(tree: ast.Module) -> list[tuple[int, str]]:
    """Where ``tree`` (a module of ``loaders/``) knows a codec: a codec name as a string
    value (docstrings aside), ``.codec`` of a chunk, an import of a codec module or name."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            if isinstance(node.value, str) and node.value in CODEC_WORDS:
                found.append((node.lineno, f"codec name {node.value!r}"))
        elif isinstance(node, ast.Attribute) and node.attr in CODEC_ATTRIBUTES:
            found.append((node.lineno, f"attribute .{node.attr}"))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules, names = _import_of(node)
            if _within(modules, CODEC_MODULES):
                found.append((node.lineno, f"import of {', '.join(modules)}"))
            elif "ticktensor.store" in modules and names & CODEC_NAMES:
                found.append((node.lineno, f"import of {', '.join(sorted(names & CODEC_NAMES))}"))
    return found


def test_loaders_know_no_codecs() -> None:
    """The store decodes chunks (``decode_chunk``); the loaders hand it the bytes and a
    buffer, and never branch on a codec or import one."""
    found = _loaders_findings(codec_knowledge)
    assert not found, "ask ticktensor.store to decode instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('if file.codec == "raw":\n    pass', 2),
        ('kind = "zstd"', 1),
        ("from ticktensor.store import Codec", 1),
        ("from ticktensor.store.codecs import codec_for", 1),
        ("import numcodecs", 1),
        ('"""A raw chunk is read into place."""', 0),
        ('def f() -> None:\n    """zstd"""', 0),
        ("from ticktensor.store import decode_chunk", 0),
        ('verify = "none"', 0),
    ],
)
def test_the_codec_check_itself(source: str, expected: int) -> None:
    assert len(codec_knowledge(ast.parse(source))) == expected


#: What reading stored bytes takes; the loaders ask the store's reader instead.
READ_MODULES = ("zarr", "fsspec", "numcodecs", "zstandard")
READ_NAMES = {"Location", "check_chunk", "decode_chunk", "read_checked", "GuardedStore"}
#: The records of either store format and the manifest: the store adapts them to blocks.
RECORD_NAMES = {"SegmentRecord", "PackRecord", "PackIndex", "Manifest", "FileEntry"}
READ_CALLS = {("os", "open"), ("os", "pread"), ("os", "read"), ("mmap", "mmap")}
READ_ATTRIBUTES = {
    "location",
    "read_range",
    "read_bytes",
    "zarr_store",
    "segments",
    "packs",
    "pack_index",
    "manifest",
}


def read_knowledge(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module reads stored bytes itself or sees the store's formats: imports of a
    reading library, of the store's reading internals or of its records,
    ``os.open``/``pread``/``mmap.mmap`` calls, the location's readers, and a version's
    segments, packs, pack indexes or manifest."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules, names = _import_of(node)
            if _within(modules, READ_MODULES):
                found.append((node.lineno, f"import of {', '.join(modules)}"))
            elif any(m.startswith("ticktensor") for m in modules) and names & (
                READ_NAMES | RECORD_NAMES
            ):
                internal = sorted(names & (READ_NAMES | RECORD_NAMES))
                found.append((node.lineno, f"import of {', '.join(internal)}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and (owner.id, node.func.attr) in READ_CALLS:
                found.append((node.lineno, f"call of {owner.id}.{node.func.attr}"))
        if isinstance(node, ast.Attribute) and node.attr in READ_ATTRIBUTES:
            found.append((node.lineno, f"attribute .{node.attr}"))
    return found


def test_loaders_read_no_stored_bytes_themselves() -> None:
    """The store owns the one read path (``StoreVersion.reader``): the loaders keep the
    geometry of chunks (which rows of which chunk) and never open, map or fetch a stored
    object, nor check or decode its bytes; they see feature blocks, never the records of
    either store format."""
    found = _loaders_findings(read_knowledge)
    assert not found, "ask ticktensor.store's ChunkReader instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import zarr", 1),
        ("from ticktensor.store import Location, check_chunk", 1),
        ("from ticktensor.kernels import read_checked", 1),
        ("fd = os.open(path, os.O_RDONLY)", 1),
        ("data = version.location.read_range(rel, 0, 8)", 2),
        ("m = mmap.mmap(-1, 4096)", 1),
        ("isinstance(base, mmap.mmap)", 0),
        ("reader = version.reader(verify)", 0),
        ("from ticktensor.store import PackRecord, StoreVersion", 1),
        ("for pack in version.packs:\n    version.pack_index(pack)", 2),
        ("blocks = version.blocks", 0),
    ],
)
def test_the_read_check_itself(source: str, expected: int) -> None:
    assert len(read_knowledge(ast.parse(source))) == expected
