"""DbnReader against the independent ``databento_dbn`` decoder on real DBN v1-v3 files."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import databento_dbn
import numpy as np
import pyarrow as pa
import pytest
import zstandard

from ticktensor.errors import ConfigError
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers._base import EventBatch, ReadOptions
from ticktensor.ingest.readers.dbn import DbnReader
from ticktensor.schemas import EventKind, conform

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "dbn"
# Definitions and statistics (reference data) are compared in test_dbn_reference.py.
REFERENCE = (".definition.", ".statistics.")
FILES = (
    sorted(
        p for p in DATA.glob("**/*") if ".dbn" in p.name and not any(r in p.name for r in REFERENCE)
    )
    if DATA.is_dir()
    else []
)
UNSUPPORTED = ("status", "imbalance")
UNDEF_PX = 2**63 - 1
UNDEF_TS = 2**64 - 1
needs_data = pytest.mark.skipif(not FILES, reason=f"no DBN samples under {DATA}")


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    return (
        zstandard.ZstdDecompressor().stream_reader(data).read() if path.suffix == ".zst" else data
    )


def _reference(path: Path) -> tuple[Any, list[Any]]:
    decoder = databento_dbn.DBNDecoder(upgrade_policy=databento_dbn.VersionUpgradePolicy.AS_IS)
    decoder.write(_raw(path))
    metadata, *records = decoder.decode()
    return metadata, records


def _read(path: Path, **options: Any) -> list[EventBatch]:
    return list(DbnReader().read(expand_inputs([str(path)])[0], ReadOptions(**options)))


def _concat(batches: list[EventBatch]) -> pa.Table:
    return pa.concat_tables([b.table for b in batches])


def _symbol(metadata: Any, record: Any) -> str:
    ts = getattr(record, "ts_recv", None) or record.ts_event
    day = dt.datetime.fromtimestamp(ts / 1e9, dt.UTC).date()
    for raw_symbol, intervals in metadata.mappings.items():
        for it in intervals:
            mapped = it["symbol"] == str(record.instrument_id)
            if mapped and it["start_date"] <= day < it["end_date"]:
                return str(raw_symbol)
    return str(record.instrument_id)


def _px(value: int) -> float | None:
    return None if value == UNDEF_PX else value / 1e9


def _ts(value: int) -> int | None:
    return None if value == UNDEF_TS else value


def _side(record: Any) -> int:
    return {"A": -1, "B": 1}.get(str(record.side.value), 0)


def _expected(metadata: Any, rec: Any, kind: EventKind) -> dict[str, Any]:
    # Sampled schemas are on the sample time, ts_recv (ts_event: the last book update).
    sampled = str(metadata.schema) in ("bbo-1s", "bbo-1m", "cbbo-1s", "cbbo-1m")
    ts_event = rec.ts_recv if sampled else rec.ts_event
    row: dict[str, Any] = {"ts_event": ts_event, "symbol": _symbol(metadata, rec)}
    row["venue"] = metadata.dataset
    if kind is EventKind.OHLCV:
        row |= {k: getattr(rec, k) / 1e9 for k in ("open", "high", "low", "close")}
        row["volume"] = float(rec.volume)
        seconds = {"1s": 1, "1m": 60, "1h": 3600, "1d": 86400}[str(metadata.schema)[-2:]]
        row["interval_ns"] = seconds * 10**9
        return row
    row |= {"ts_recv": _ts(rec.ts_recv), "sequence": rec.sequence}
    if kind is EventKind.QUOTES:
        level = rec.levels[0]
        for side in ("bid", "ask"):
            empty = getattr(level, f"{side}_px") == UNDEF_PX
            row[f"{side}_px"] = _px(getattr(level, f"{side}_px"))
            row[f"{side}_sz"] = None if empty else float(getattr(level, f"{side}_sz"))
            row[f"{side}_ct"] = None if empty else getattr(level, f"{side}_ct")
        return row
    row |= {"price": _px(rec.price), "size": float(rec.size), "side": _side(rec)}
    if kind is EventKind.TRADES:
        return row
    row["action"] = str(rec.action.value)
    if kind is EventKind.MBO:
        return row | {"order_id": rec.order_id, "flags": int(rec.flags)}
    for i, level in enumerate(rec.levels):
        for side in ("bid", "ask"):
            empty = getattr(level, f"{side}_px") == UNDEF_PX
            row[f"{side}_px_{i:02d}"] = _px(getattr(level, f"{side}_px"))
            row[f"{side}_sz_{i:02d}"] = None if empty else float(getattr(level, f"{side}_sz"))
            row[f"{side}_ct_{i:02d}"] = None if empty else getattr(level, f"{side}_ct")
    return row


def _actual(table: pa.Table) -> list[dict[str, Any]]:
    out = []
    for row in table.to_pylist():
        for key in ("ts_event", "ts_recv"):
            if row.get(key) is not None:
                row[key] = row[key].value
        out.append(row)
    return out


def _assert_rows_equal(actual: dict[str, Any], expected: dict[str, Any], where: str) -> None:
    for key, want in expected.items():
        got = actual[key]
        same = got == want or (isinstance(want, float) and math.isclose(got, want, rel_tol=0))
        assert same, f"{where} column {key}: got {got!r}, expected {want!r}"


@needs_data
@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_rows_match_databento_dbn(path: Path) -> None:
    metadata, records = _reference(path)
    if str(metadata.schema) in UNSUPPORTED:
        with pytest.raises(ConfigError, match=f"DBN schema '{metadata.schema}' has no canonical"):
            _read(path)
        return
    kinds = [None, EventKind.TRADES] if str(metadata.schema) == "tbbo" else [None]
    for requested in kinds:
        batches = _read(path, kind=requested, batch_rows=50_000)
        kind = batches[0].kind
        table = _concat(batches)
        assert conform(table, kind).num_rows == len(records)
        rows = np.concatenate([b.rows for b in batches])
        np.testing.assert_array_equal(rows, np.arange(1, len(records) + 1))
        assert all(b.rejects.num_rows == 0 for b in batches)
        for i, (got, rec) in enumerate(zip(_actual(table), records, strict=True)):
            _assert_rows_equal(got, _expected(metadata, rec, kind), f"{path.name} record {i + 1}")


@needs_data
def test_batches_of_three_equal_one_batch() -> None:
    path = DATA / "GLBX.MDP3" / "test_data.mbp-10.dbn.zst"
    small = _read(path, batch_rows=3)
    assert [b.table.num_rows for b in small] == [3, 1]
    assert _concat(small).equals(_concat(_read(path)))
    assert np.concatenate([b.rows for b in small]).tolist() == [1, 2, 3, 4]


@needs_data
def test_big_mbo_file_streams_in_bounded_batches() -> None:
    batches = _read(DATA / "esh4-glbx-mdp3-20231225.mbo.dbn.zst", batch_rows=10_000)
    assert max(b.table.num_rows for b in batches) <= 10_000
    assert sum(b.table.num_rows for b in batches) == 68_792


@needs_data
def test_truncated_file_rejects_partial_record(tmp_path: Path) -> None:
    raw = _raw(DATA / "versions" / "test_data.trades.v1.dbn.zst")
    path = tmp_path / "cut.dbn"
    path.write_bytes(raw[:-10])
    batches = _read(path)
    assert _concat(batches).num_rows == 1
    rejects = pa.concat_tables([b.rejects for b in batches]).to_pylist()
    assert len(rejects) == 1
    assert rejects[0]["row"] == 2
    assert rejects[0]["rule"] == "unparseable"
    offset = len(raw) - 48  # the second 48-byte trade record starts here
    assert (
        f"cut.dbn record 2 at byte offset {offset}: truncated record (38 of 48"
        in (rejects[0]["message"])
    )


@needs_data
def test_wrong_kind_names_both() -> None:
    with pytest.raises(ConfigError, match=r"requested kind 'mbo' but the DBN schema is 'trades'"):
        _read(DATA / "GLBX.MDP3" / "test_data.trades.dbn.zst", kind=EventKind.MBO)


@needs_data
def test_unmapped_instrument_falls_back_to_option_then_id(tmp_path: Path) -> None:
    raw = bytearray(_raw(DATA / "versions" / "test_data.trades.v1.dbn.zst"))
    first = len(raw) - 2 * 48
    for start in (first, first + 48):
        raw[start + 4 : start + 8] = (777).to_bytes(4, "little")
    path = tmp_path / "other.dbn"
    path.write_bytes(bytes(raw))
    assert _concat(_read(path)).column("symbol").to_pylist() == ["777", "777"]
    assert _concat(_read(path, symbol="ES")).column("symbol").to_pylist() == ["ES", "ES"]


def test_not_dbn_and_sniff(tmp_path: Path) -> None:
    assert DbnReader.sniff("x.bin", b"DBN\x03....")
    assert not DbnReader.sniff("x.dbn", b"PAR1")
    path = tmp_path / "fake.dbn"
    path.write_bytes(b"PAR1 not dbn")
    with pytest.raises(ConfigError, match=r"fake\.dbn: not a DBN file"):
        _read(path)
