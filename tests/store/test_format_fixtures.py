"""Every released store format version stays readable: frozen fixtures in tests/fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ticktensor.errors import FormatVersionError
from ticktensor.store import Store, open_store

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _expected() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_store_v1", FIXTURES / "make_store_v1.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.expected


def test_reads_format_v1_fixture(tmp_path: Path) -> None:
    expected = _expected()
    # Copy first: the fixture is read-only in CI and verify must not need to write.
    url = str(tmp_path / "store-v1")
    shutil.copytree(FIXTURES / "store-v1", url)
    store = Store.open(url)
    assert store.latest_version() == 2
    v = open_store(url)
    assert v.symbols == ("AAA", "B/B")
    assert v.feature_names == ("f0", "f1", "f2")
    assert v.label_names == ("y",)
    assert v.stats is not None
    assert v.stats.mean == (1.0, 2.0, 3.0)
    for seg in v.segments:
        ts, values, labels = expected(seg.symbol, 150)  # type: ignore[operator]
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
        FormatVersionError, match="store format version 99; this ticktensor reads 1"
    ):
        Store.open(str(url))
