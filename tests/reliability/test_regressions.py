"""Inputs the long fuzz runs found, reduced to the smallest case that showed each bug."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ticktensor.errors import ConfigError, FormatVersionError, InputError, StoreCorruptError
from ticktensor.ingest import IngestOptions, ingest, validate_inputs
from ticktensor.ingest.readers import ReadOptions
from ticktensor.ingest.readers._layout_hints import layout_hint
from ticktensor.ingest.readers._tabular import guard
from ticktensor.store import Manifest, Store
from ticktensor.store._log import LogEntry


def test_an_empty_symbol_is_quarantined_not_a_crash(tmp_path: Path) -> None:
    # Found by csv-trades and dbn: an empty symbol reached the staging path builder.
    src = tmp_path / "trades.csv"
    src.write_text(
        "ts_event,symbol,price,size,side\n"
        "1704186000000000000,AAPL,10.0,5,B\n"
        "1704186000000001000,,10.5,5,S\n"
        "1704186000000002000,AAPL,10.25,5,B\n"
    )
    options = IngestOptions(workers=1, read=ReadOptions(kind="trades"))  # type: ignore[arg-type]
    result = ingest([str(src)], str(tmp_path / "s"), options, progress=False)
    assert (result.rows_read, result.rows_stored, result.rows_quarantined) == (3, 2, 1)
    assert result.files[0].rules == {"not_null": 1}
    q = Store.open(str(tmp_path / "s")).version()
    table = q.read_table(q.tables_of("quarantine")[0])
    [message] = table.column("message").to_pylist()
    assert message.startswith(f"{src} row 2: symbol is empty (rule not_null")


@pytest.mark.parametrize("later", ["1704186000011018524", "-9223372036854775808"])
def test_an_epoch_time_past_the_inferred_unit_is_quarantined(tmp_path: Path, later: str) -> None:
    # Found by ingest-csv: the first time (12 digits) makes the file's unit ms, so a later
    # ns time overflowed int64 ns in the integer path and pyarrow's ArrowInvalid ended the job.
    src = tmp_path / "trades.csv"
    src.write_text(
        "ts_event,symbol,price,size,side\n"
        "170410741177,AAPL,10.0,5,B\n"
        f"{later},AAPL,10.5,5,S\n"
        "170410741178,AAPL,10.25,5,B\n"
    )
    options = IngestOptions(workers=1, read=ReadOptions(kind="trades"))  # type: ignore[arg-type]
    result = ingest([str(src)], str(tmp_path / "s"), options, progress=False)
    assert (result.rows_read, result.rows_stored, result.rows_quarantined) == (3, 2, 1)
    q = Store.open(str(tmp_path / "s")).version()
    [message] = q.read_table(q.tables_of("quarantine")[0]).column("message").to_pylist()
    assert message.startswith(f"{src} row 2: column 'ts_event' value '{later}' is out of the ")
    assert "as ms since the epoch" in message


@pytest.mark.parametrize("line", ["exchange,sym\rbol,timestamp", "1|2\n3", "x" * 200_000])
def test_a_layout_hint_of_a_line_csv_refuses_is_no_crash(line: str) -> None:
    # Found by tardis, lobster-message and lobster-orderbook: the hint added to a text
    # reader's error split the first line with the csv module, whose csv.Error (a carriage
    # return inside the line, a field past its size limit) ended the read instead.
    assert layout_hint(line, ",", True) in ("", " (its first line splits into 2 fields on "
                                                "'|': pass --delimiter '|')")  # fmt: skip


def test_a_tardis_header_with_a_carriage_return_is_a_config_error(tmp_path: Path) -> None:
    src = tmp_path / "tardis.csv"
    src.write_bytes(b"exchange,sym\rbol,timestamp\n1,2,3\n")
    options = IngestOptions(format="tardis", workers=1)
    with pytest.raises(ConfigError, match="tardis"):
        validate_inputs([str(src)], str(tmp_path / "s"), options, progress=False)


def test_a_manifest_number_beyond_a_double_is_refused() -> None:
    # Found by the manifest target: 1e999 parsed as inf, which to_json cannot write.
    store = Store.create("memory://tt-regression-inf", exist_ok=True)
    entry = store.location.read_bytes("versions/00000000.json")
    checkpoint = store.version().manifest.to_json()
    huge = b'"stats":{"names":["x"],"mean":[1e999],"std":[1.0],"count":1,"period":[0,1]}'
    for data, parse in ((entry, LogEntry.from_json), (checkpoint, Manifest.from_json)):
        forged = data.replace(b'"stats":null', huge)
        assert forged != data
        with pytest.raises(StoreCorruptError, match="out of the range of a double"):
            parse(forged, "v0.json")


def test_a_declared_size_past_memory_is_an_input_error() -> None:
    # Found by the arrow target: a corrupt IPC message made pyarrow raise MemoryError.
    def batches() -> Iterator[int]:
        yield 1
        raise MemoryError

    with pytest.raises(InputError, match=r"x\.arrow: not a readable Arrow IPC file"):
        list(guard("x.arrow", "Arrow IPC", batches()))


@pytest.mark.parametrize("value", [b"[2]", b"{}", b"true"])
def test_a_checkpoint_format_version_of_another_json_type_is_refused(value: bytes) -> None:
    # Found by the manifest-fields fuzzer: a list as format_version made the format check
    # hash it (TypeError); true passed as version 1.
    store = Store.create(f"memory://tt-regression-fv-{value.hex()}", exist_ok=True)
    checkpoint = store.version().manifest.to_json()
    forged = checkpoint.replace(b'"format_version":2', b'"format_version":' + value)
    assert forged != checkpoint
    with pytest.raises(FormatVersionError, match="format version"):
        Manifest.from_json(forged, "v0.checkpoint.json")
