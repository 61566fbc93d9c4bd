"""Security: nothing read is trusted. No pickle or eval; manifest paths stay inside the
store (no ``..``, absolute paths or symlinks); decompression is bounded.

The malicious stores here are self-consistent: the attacker rewrote the manifest and the
pointer's hash too, so only structural checks can stop them.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard

from ticktensor import DataLoader
from ticktensor.errors import StoreCorruptError
from ticktensor.loaders import WindowDataset
from ticktensor.store import Store

from .conftest import segment_store

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ["ticktensor", "ingest", "store", "schemas", "loaders"]
FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "jsonpickle"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}


def test_no_pickle_or_eval_anywhere_in_the_package() -> None:
    found = []
    for folder in PACKAGE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module.split(".")[0]]
                if FORBIDDEN_MODULES & set(names):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {names}")
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in FORBIDDEN_CALLS
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} calls {node.func.id}")
                unpickles = isinstance(node, ast.keyword) and node.arg == "allow_pickle"
                if unpickles and not (
                    isinstance(node.value, ast.Constant) and node.value.value is False
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} allow_pickle")
    assert found == []


# -- a self-consistent malicious store ---------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    return segment_store(root, "zstd")


def _forge(root: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the latest manifest with ``edit`` and make the pointer vouch for it."""
    pointer = json.loads((root / "latest.json").read_text())
    path = root / pointer["manifest"]
    doc = json.loads(path.read_text())
    edit(doc)
    data = json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"
    path.write_bytes(data)
    pointer["sha256"] = hashlib.sha256(data).hexdigest()
    (root / "latest.json").write_text(json.dumps(pointer))


def _rehash(root: Path, doc: dict[str, Any], seg: int, name: str) -> None:
    data = (root / doc["segments"][seg]["path"] / name).read_bytes()
    doc["segments"][seg]["files"][name] = [hashlib.sha256(data).hexdigest(), len(data)]


def _read_all(root: Path) -> None:
    pinned = Store.open(str(root)).version()
    for seg in pinned.segments:
        pinned.read_segment(seg)
    for table in pinned.tables:
        pinned.read_table(table)


def _load_all(root: Path) -> None:
    dataset = WindowDataset(Store.open(str(root)).version(), 32)
    for _ in DataLoader(dataset, batch_size=64):
        pass


@pytest.mark.parametrize(
    "path",
    ["../outside", "/etc", "segments/../../x", "segments/a/../../../x", "segments\\..\\x",
     "segments//x", "file:/etc/x", "segments/./x", "events/x"],
)  # fmt: skip
def test_segment_paths_must_stay_inside_the_store(store: Path, path: str) -> None:
    _forge(store, lambda doc: doc["segments"][0].__setitem__("path", path))
    with pytest.raises(StoreCorruptError, match="store_relative_path"):
        Store.open(str(store)).version()


@pytest.mark.parametrize("name", ["../../../../etc/passwd", "/etc/passwd", "values/../../x"])
def test_segment_file_names_must_stay_inside_the_segment(store: Path, name: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        files = doc["segments"][0]["files"]
        files[name] = files.pop("values/c/0/0")

    _forge(store, edit)
    with pytest.raises(StoreCorruptError, match="store_relative_path"):
        Store.open(str(store)).version()


def test_table_paths_must_stay_inside_events(store: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["tables"] = [
            {
                "kind": "trades",
                "symbol": "S0",
                "session": "x",
                "path": "../../etc/passwd",
                "rows": 1,
                "ts_start": None,
                "ts_end": None,
                "file": ["0" * 64, 1],
                "sources": [],
            }
        ]

    _forge(store, edit)
    with pytest.raises(StoreCorruptError, match="store_relative_path"):
        Store.open(str(store)).version()


def _outside_copy(store: Path, seg: str) -> Path:
    outside = store.parent / "outside"
    os.rename(store / seg, outside)
    return outside


def test_a_symlinked_segment_is_refused(store: Path) -> None:
    seg = Store.open(str(store)).version().segments[0].path
    os.symlink(_outside_copy(store, seg), store / seg)
    with pytest.raises(StoreCorruptError, match="store_relative_path"):
        _read_all(store)
    with pytest.raises((StoreCorruptError, OSError)):
        _load_all(store)


def test_a_symlinked_chunk_is_refused(store: Path) -> None:
    seg = Store.open(str(store)).version().segments[0].path
    chunk = store / seg / "values" / "c" / "0" / "0"
    outside = store.parent / "secret"
    os.rename(chunk, outside)  # same bytes, so hashes and sizes still match
    os.symlink(outside, chunk)
    with pytest.raises(StoreCorruptError, match="symlink"):
        _read_all(store)
    with pytest.raises((StoreCorruptError, OSError), match="values/c/0/0"):
        _load_all(store)


def test_a_symlinked_table_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa

    s = Store.create(str(tmp_path / "s"))
    rec = s.write_table(kind="trades", symbol="A", session="d", table=pa.table({"x": [1]}))
    s.commit(tables=[rec])
    target = tmp_path / "s" / rec.path
    os.rename(target, tmp_path / "elsewhere.parquet")
    os.symlink(tmp_path / "elsewhere.parquet", target)
    with pytest.raises(StoreCorruptError, match="outside the store root"):
        _read_all(tmp_path / "s")


# -- decompression limits ----------------------------------------------------------


def _bomb_chunk(decoded: int) -> bytes:
    return zstandard.ZstdCompressor().compress(b"\0" * decoded)


def test_a_zstd_bomb_chunk_is_refused_before_decoding(store: Path) -> None:
    bomb = _bomb_chunk(256 << 20)  # 256 MiB from a few KiB; a chunk holds 32 KiB

    def edit(doc: dict[str, Any]) -> None:
        (store / doc["segments"][0]["path"] / "values/c/0/0").write_bytes(bomb)
        _rehash(store, doc, 0, "values/c/0/0")

    _forge(store, edit)
    with pytest.raises(StoreCorruptError, match=r"values/c/0/0: zstd frame decodes to"):
        _read_all(store)
    with pytest.raises((StoreCorruptError, OSError), match="values/c/0/0"):
        _load_all(store)


def test_a_pickle_codec_in_zarr_metadata_is_never_run(store: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (open, (str(marker), "w"))

    def edit(doc: dict[str, Any]) -> None:
        seg = store / doc["segments"][0]["path"]
        meta = json.loads((seg / "values/zarr.json").read_text())
        meta["codecs"] = [{"name": "numcodecs.pickle", "configuration": {}}]
        (seg / "values/zarr.json").write_text(json.dumps(meta))
        (seg / "values/c/0/0").write_bytes(pickle.dumps(Payload()))
        for name in ("values/zarr.json", "values/c/0/0"):
            _rehash(store, doc, 0, name)

    _forge(store, edit)
    with pytest.raises(StoreCorruptError):
        _read_all(store)
    assert not marker.exists()
    with pytest.raises((StoreCorruptError, OSError, ValueError)):
        _load_all(store)
    assert not marker.exists()


BOMB_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
from ticktensor.errors import InputError
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import CsvReader, ReadOptions
source = expand_inputs([sys.argv[1]])[0]
try:
    for _ in CsvReader().read(source, ReadOptions(kind="trades", symbol="X")):
        pass
except InputError as exc:
    print("InputError:", exc)
"""


def test_a_zstd_bomb_input_is_an_error_not_an_oom(tmp_path: Path) -> None:
    frame = zstandard.ZstdCompressor(level=19).compress(b"1" * (64 << 20))
    path = tmp_path / "trades.csv.zst"
    path.write_bytes(b"".join([frame] * 128))  # 8 GiB of one line, from ~300 KiB
    assert path.stat().st_size < 4 << 20
    done = subprocess.run(
        [sys.executable, "-c", BOMB_CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "without a line break" in done.stdout


def test_the_dbn_metadata_length_is_bounded(tmp_path: Path) -> None:
    from ticktensor.errors import InputError
    from ticktensor.ingest._sources import expand_inputs
    from ticktensor.ingest.readers import ReadOptions
    from ticktensor.ingest.readers.dbn import DbnReader

    path = tmp_path / "x.dbn"
    path.write_bytes(b"DBN\x03" + np.uint32(0xFFFFFFF0).tobytes() + b"\0" * 64)
    with pytest.raises(InputError, match="exceeds"):
        list(DbnReader().read(expand_inputs([str(path)])[0], ReadOptions()))
