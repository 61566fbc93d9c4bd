"""Every released store format version stays readable: frozen fixtures in tests/fixtures."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ticktensor.errors import FormatVersionError
from ticktensor.store import Store, open_store
from ticktensor.store.testing import write_segment

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _generator(name: str) -> Any:
    """The fixture's generator module (it holds the formula of the stored arrays)."""
    spec = importlib.util.spec_from_file_location(name, FIXTURES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _expected() -> Any:
    return _generator("make_store_v1").expected


def test_reads_format_v1_fixture(tmp_path: Path) -> None:
    expected = _expected()
    # Copy first: the fixture is read-only in CI and verify must not need to write.
    url = str(tmp_path / "store-v1")
    shutil.copytree(FIXTURES / "store-v1", url)
    store = Store.open(url)
    assert store.latest_version() == 2
    assert store.format_version == 1
    v = open_store(url)
    assert v.symbols == ("AAA", "B/B")
    assert v.feature_names == ("f0", "f1", "f2")
    assert v.label_names == ("y",)
    assert v.stats is not None
    assert v.stats.mean == (1.0, 2.0, 3.0)
    for seg in v.segments:
        ts, values, labels = expected(seg.symbol, 150)
        data = v.read_segment(seg)
        np.testing.assert_array_equal(data.ts, ts)
        np.testing.assert_array_equal(data.values, values)
        np.testing.assert_array_equal(data.labels, labels)
    assert [s.layout["codec"] for s in v.segments] == ["none", "zstd"]
    (trades, _) = v.tables_of("trades")
    assert v.read_table(trades).column("price").to_pylist() == [1.5, 2.5, 3.5]
    assert [s.symbol for s in store.version(1).segments] == ["AAA"]
    store.verify()
    store.verify(1)


def test_unknown_format_version_refused(tmp_path: Path) -> None:
    url = tmp_path / "future"
    shutil.copytree(FIXTURES / "store-v1", url)
    header = url / "ticktensor.json"
    header.write_text(header.read_text().replace('"format_version": 1', '"format_version": 99'))
    with pytest.raises(
        FormatVersionError, match="store format version 99; this ticktensor reads 1 and 2"
    ):
        Store.open(str(url))


def test_reads_format_v2_fixture(tmp_path: Path) -> None:
    make = _generator("make_store_v2")
    url = str(tmp_path / "store-v2")
    shutil.copytree(FIXTURES / "store-v2", url)
    store = Store.open(url)
    assert store.latest_version() == 4
    assert store.format_version == 2
    assert store.checkpoint_every == 2
    assert [m.message for m in store.versions()] == [
        "create store",
        "add AAA",
        "add B/B",
        "correct AAA",
        "pack 2023-11-15",
    ]
    codecs = {"AAA": "none", "B/B": "zstd"}
    revisions_of = {
        1: {"AAA": 0},
        2: {"AAA": 0, "B/B": 0},
        3: {"AAA": 1, "B/B": 0},
        4: {"AAA": 1, "B/B": 0},
    }
    for version, revisions in revisions_of.items():
        v = store.version(version)
        assert v.feature_names == ("f0", "f1", "f2")
        assert v.label_names == ("y",)
        assert v.stats is not None
        assert v.stats.mean == (1.0, 2.0, 3.0)
        assert {s.symbol: s.layout["codec"] for s in v.segments} == {
            k: codecs[k] for k in revisions
        }
        assert [s.symbol for s in v.segments] == sorted(revisions)
        for seg in v.segments:
            ts, values, labels = make.expected(seg.symbol, 150, revisions[seg.symbol])
            data = v.read_segment(seg, verify=True)
            np.testing.assert_array_equal(data.ts, ts)
            np.testing.assert_array_equal(data.values, values)
            np.testing.assert_array_equal(data.labels, labels)
        (trades, *_) = v.tables_of("trades")
        assert v.read_table(trades).column("price").to_pylist() == [1.5, 2.5, 3.5]
        store.verify(version)
        assert [p.session for p in v.packs] == (["2023-11-15"] if version == 4 else [])
    assert len(store.version(3).tables_of("trades")) == 2
    v4 = store.version(4)
    (pack,) = v4.packs
    assert (pack.rows, pack.symbols, pack.layout["codec"]) == (300, 2, "zstd")
    assert v4.symbols == ("AAA", "B/B")
    data = v4.read_pack(pack, verify=True)
    assert data.symbols == ("AAA", "B/B")
    assert data.offsets.tolist() == [0, 150, 300]
    for i, symbol in enumerate(data.symbols):
        ts, values, labels = make.expected(symbol, 150, revision=2, day=1)
        np.testing.assert_array_equal(data.ts[i * 150 : (i + 1) * 150], ts)
        np.testing.assert_array_equal(data.values[i * 150 : (i + 1) * 150], values)
        assert data.labels is not None
        np.testing.assert_array_equal(data.labels[i * 150 : (i + 1) * 150], labels)
    assert (Path(url) / "versions/00000004.checkpoint.json").is_file()
    checkpoint = json.loads((Path(url) / "versions/00000004.checkpoint.json").read_text())
    assert [p["session"] for p in checkpoint["packs"]] == ["2023-11-15"]


def test_a_format_v1_store_appended_by_this_version(tmp_path: Path) -> None:
    expected = _expected()
    url = tmp_path / "store-v1"
    shutil.copytree(FIXTURES / "store-v1", url)
    v1_files = {p: p.read_bytes() for p in url.rglob("*") if p.is_file()}
    store = Store.open(str(url))
    ts, values, labels = expected("AAA", 150)
    names = {"feature_names": ("f0", "f1", "f2"), "label_names": ("y",)}
    again = write_segment(
        store, symbol="AAA", session="2023-11-14", ts=ts, values=values, labels=labels, **names
    )
    assert again == store.version().segment("AAA", "2023-11-14")  # a rerun writes nothing
    assert store.commit(segments=[again]).version == 2
    for day in range(8):  # versions 3..10: a checkpoint at 10
        seg = write_segment(
            store,
            symbol="AAA",
            session=f"2023-11-{15 + day}",
            ts=ts,
            values=values + day,
            labels=labels,
            **names,
        )
        store.commit(segments=[seg], message=f"day {day}")
    assert all(p.read_bytes() == data for p, data in v1_files.items() if p.name != "latest.json")
    assert json.loads((url / "latest.json").read_text())["format_version"] == 2
    assert json.loads((url / "versions/00000003.json").read_text())["format"] == "ticktensor.log"
    assert (url / "versions/00000010.checkpoint.json").is_file()
    reopened = Store.open(str(url))
    assert (store.format_version, reopened.format_version) == (2, 2)
    for version in range(11):
        reopened.verify(version)
    assert [s.session for s in reopened.version(9).segments if s.symbol == "AAA"] == [
        f"2023-11-{14 + d}" for d in range(8)
    ]
    assert [s.symbol for s in reopened.version(2).segments] == ["AAA", "B/B"]
    data = reopened.version().read_segment(reopened.version().segment("AAA", "2023-11-22"))
    np.testing.assert_array_equal(data.values, values + 7)


def test_a_log_entry_of_an_unknown_format_version_is_refused(tmp_path: Path) -> None:
    url = tmp_path / "future"
    shutil.copytree(FIXTURES / "store-v2", url)
    entry = url / "versions/00000004.json"
    data = entry.read_bytes().replace(b'"format_version":2', b'"format_version":3')
    entry.write_bytes(data)
    pointer = json.loads((url / "latest.json").read_text())
    pointer["sha256"] = hashlib.sha256(data).hexdigest()
    (url / "latest.json").write_text(json.dumps(pointer))
    with pytest.raises(FormatVersionError, match="log entry format version 3; this ticktensor"):
        Store.open(str(url)).version()
    pointer["format_version"] = 3
    (url / "latest.json").write_text(json.dumps(pointer))
    with pytest.raises(FormatVersionError, match="pointer format version 3"):
        Store.open(str(url)).version()
