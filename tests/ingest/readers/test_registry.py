"""The reader registry: names, lookup errors and format detection."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ticktensor.errors import ConfigError
from ticktensor.ingest import readers
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import READERS, detect, get_reader

DATA = Path(__file__).resolve().parents[3].parent.joinpath("shared/data")
TABLE = pa.table({"a": [1, 2]})


def test_all_is_sorted_and_exported() -> None:
    def order(name: str) -> tuple[int, str]:  # constants, classes, functions (isort style)
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert readers.__all__ == sorted(readers.__all__, key=order)
    assert all(hasattr(readers, name) for name in readers.__all__)


def test_names_and_lookup() -> None:
    assert {"arrow", "csv", "parquet"} <= set(READERS)
    for name, cls in READERS.items():
        assert cls.name == name
        assert isinstance(get_reader(name), cls)
    with pytest.raises(ConfigError, match=r"'xls'.*arrow, binance, csv"):
        get_reader("xls")


def _detect(path: Path) -> str:
    return detect(expand_inputs([str(path)])[0]).name


def test_binary_formats_by_content_whatever_the_name(tmp_path: Path) -> None:
    pq.write_table(TABLE, tmp_path / "x.bin")
    assert _detect(tmp_path / "x.bin") == "parquet"
    with pa.OSFile(str(tmp_path / "f.dat"), "wb") as f, pa.ipc.new_file(f, TABLE.schema) as w:
        w.write_table(TABLE)
    assert _detect(tmp_path / "f.dat") == "arrow"
    with pa.OSFile(str(tmp_path / "s.dat"), "wb") as f, pa.ipc.new_stream(f, TABLE.schema) as w:
        w.write_table(TABLE)
    assert _detect(tmp_path / "s.dat") == "arrow"


def test_text_formats_by_name_header_and_suffix() -> None:
    assert _detect(DATA / "fx" / "usdjpy-ticks.csv") == "csv"
    expectations = {
        "dbn": DATA / "dbn" / "futures_trades_2024-07-01T23-58_2024-07-02T00-02.dbn.zst",
        "lobster": DATA / "lobster" / "AMZN_2012-06-21_34200000_57600000_message_1.csv",
        "tardis": DATA / "tardis" / "bitmex_trades_XBTUSD.csv",
    }
    for name, path in expectations.items():
        if name in READERS:
            assert _detect(path) == name
        else:  # that reader is not written yet: detection says so instead of guessing
            with pytest.raises(ConfigError, match="--format"):
                _detect(path)


def test_ambiguous_input_names_the_file_and_suggests_format(tmp_path: Path) -> None:
    path = tmp_path / "mystery.dat"
    path.write_bytes(b"1 2 3\n")
    with pytest.raises(ConfigError, match=r"mystery\.dat.*--format"):
        _detect(path)
