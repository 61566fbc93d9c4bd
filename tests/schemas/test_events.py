"""Canonical event schemas and conform()."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from ticktensor import schemas
from ticktensor.errors import SchemaError
from ticktensor.schemas import MBP_DEPTH, SCHEMA_VERSION_KEY, EventKind, conform, schema_for

TS = pa.timestamp("ns", tz="UTC")
HEADER = [
    ("ts_event", TS, False),
    ("ts_recv", TS, True),
    ("symbol", pa.string(), False),
    ("venue", pa.string(), True),
]


def _layout(kind: EventKind) -> list[tuple[str, pa.DataType, bool]]:
    schema = schema_for(kind)
    return [(f.name, f.type, f.nullable) for f in schema]


def test_all_is_sorted_and_every_name_exists() -> None:
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions, each alphabetical.
    def key(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert schemas.__all__ == sorted(schemas.__all__, key=key)
    for name in schemas.__all__:
        assert hasattr(schemas, name), name


def test_event_kind_values_and_lookup() -> None:
    market = ["trades", "quotes", "mbp10", "mbo", "ohlcv"]
    assert [k.value for k in EventKind] == [*market, "definitions", "statistics"]
    assert {k.value for k in schemas.REFERENCE_KINDS} == {"definitions", "statistics"}
    assert schema_for("quotes") is schema_for(EventKind.QUOTES)
    with pytest.raises(SchemaError, match=r"unknown event kind 'bars'; expected one of 'trades'"):
        schema_for("bars")


def test_trades_schema() -> None:
    assert _layout(EventKind.TRADES) == [
        *HEADER,
        ("price", pa.float64(), False),
        ("size", pa.float64(), False),
        ("side", pa.int8(), False),
        ("trade_id", pa.string(), True),
        ("sequence", pa.uint64(), True),
    ]


def test_quotes_schema() -> None:
    assert _layout(EventKind.QUOTES) == [
        *HEADER,
        ("bid_px", pa.float64(), True),
        ("ask_px", pa.float64(), True),
        ("bid_sz", pa.float64(), True),
        ("ask_sz", pa.float64(), True),
        ("bid_ct", pa.uint32(), True),
        ("ask_ct", pa.uint32(), True),
        ("sequence", pa.uint64(), True),
    ]


def test_mbp10_schema_has_flat_levels() -> None:
    layout = _layout(EventKind.MBP10)
    assert layout[:8] == [
        *HEADER,
        ("action", pa.string(), False),
        ("side", pa.int8(), False),
        ("price", pa.float64(), True),
        ("size", pa.float64(), True),
    ]
    assert layout[-1] == ("sequence", pa.uint64(), True)
    levels = layout[8:-1]
    expected = [
        (f"{side}_{q}_{i:02d}", pa.uint32() if q == "ct" else pa.float64(), True)
        for q in ("px", "sz", "ct")
        for side in ("bid", "ask")
        for i in range(MBP_DEPTH)
    ]
    assert levels == expected
    assert len(levels) == 60


def test_mbo_schema() -> None:
    assert _layout(EventKind.MBO) == [
        *HEADER,
        ("order_id", pa.uint64(), False),
        ("action", pa.string(), False),
        ("side", pa.int8(), False),
        ("price", pa.float64(), True),
        ("size", pa.float64(), False),
        ("flags", pa.uint8(), True),
        ("sequence", pa.uint64(), True),
    ]


def test_ohlcv_schema_has_no_recv_time() -> None:
    assert _layout(EventKind.OHLCV) == [
        ("ts_event", TS, False),
        ("symbol", pa.string(), False),
        ("venue", pa.string(), True),
        ("interval_ns", pa.int64(), False),
        *[(n, pa.float64(), False) for n in ("open", "high", "low", "close")],
        ("volume", pa.float64(), True),  # null where the source reports none (FX bars)
        ("trade_count", pa.uint64(), True),
        ("vwap", pa.float64(), True),
    ]


@pytest.mark.parametrize("kind", list(EventKind))
def test_schema_metadata_and_field_descriptions(kind: EventKind) -> None:
    schema = schema_for(kind)
    assert schema.metadata[SCHEMA_VERSION_KEY] == b"1"
    assert schema.metadata[b"ticktensor.kind"] == kind.value.encode()
    for field in schema:
        assert field.metadata[b"description"], field.name
    assert schema.field("ts_event").metadata[b"unit"] == b"ns since UNIX epoch, UTC"


def _raw_trades() -> pa.Table:
    return pa.table(
        {
            "size": pa.array([1, 2], pa.int32()),
            "symbol": ["X", "X"],
            "ts_event": pa.array([1_000, 2_000], pa.timestamp("ms")),
            "price": ["10.5", "11"],
            "side": pa.array([1, -1], pa.int64()),
            "extra": [0, 0],
        }
    )


def test_conform_casts_orders_fills_and_drops() -> None:
    out = conform(_raw_trades(), "trades")
    assert out.schema == schema_for("trades")
    assert out.schema.metadata == schema_for("trades").metadata
    assert out.column("price").to_pylist() == [10.5, 11.0]
    assert out.column("ts_event").cast(pa.int64()).to_pylist() == [10**9, 2 * 10**9]
    assert out.column("venue").null_count == 2
    assert "extra" not in out.column_names


def test_conform_extra_error_names_the_columns() -> None:
    with pytest.raises(SchemaError, match="columns not in the trades schema: extra"):
        conform(_raw_trades(), "trades", extra="error")


def test_conform_missing_required_column() -> None:
    with pytest.raises(SchemaError, match=r"missing required column 'price' \(expected double\)"):
        conform(_raw_trades().drop(["price"]), "trades")


def test_conform_bad_type_names_column_expected_and_got() -> None:
    table = _raw_trades().set_column(3, "price", pa.array(["10.5", "ten"]))
    msg = "trades column 'price': expected double, got string which does not cast safely"
    with pytest.raises(SchemaError, match=re.escape(msg)):
        conform(table, "trades")
    lossy = _raw_trades().set_column(4, "side", pa.array([1.5, -1.0]))
    with pytest.raises(SchemaError, match=r"column 'side': expected int8, got double"):
        conform(lossy, "trades")


def test_conform_rejects_nulls_in_required_columns() -> None:
    table = _raw_trades().set_column(3, "price", pa.array([1.0, None]))
    with pytest.raises(
        SchemaError, match=r"'price' is required but holds 1 null\(s\), first at row 1"
    ):
        conform(table, "trades")


def test_conform_other_timezones_become_utc() -> None:
    ts = pa.array([0], pa.timestamp("s", tz="America/New_York"))
    table = pa.table({"ts_event": ts, "symbol": ["X"], "bid_px": [1.0], "ask_px": [1.1]})
    out = conform(table, EventKind.QUOTES)
    assert out.column("ts_event").type == TS
    assert out.column("ts_event").cast(pa.int64()).to_pylist() == [0]


DOC = Path(__file__).resolve().parents[2] / "docs" / "schemas.md"


@pytest.mark.parametrize("kind", list(EventKind))
def test_every_column_is_documented(kind: EventKind) -> None:
    text = DOC.read_text()
    for name in schema_for(kind).names:
        generic = re.sub(r"_\d\d$", "_00", name)  # levels are documented as ranges
        assert f"`{generic}`" in text, f"{name} of {kind.value} is missing from {DOC.name}"


def test_reference_schemas_require_only_time_symbol_and_stat_type() -> None:
    definitions, statistics = schema_for("definitions"), schema_for("statistics")
    assert [f.name for f in definitions if not f.nullable] == ["ts_event", "symbol"]
    assert [f.name for f in statistics if not f.nullable] == ["ts_event", "symbol", "stat_type"]
    assert definitions.field("expiration").type == TS
    assert definitions.field("strike_price").type == pa.float64()
    assert statistics.field("quantity").type == pa.float64()
    assert definitions.metadata[b"ticktensor.kind"] == b"definitions"
