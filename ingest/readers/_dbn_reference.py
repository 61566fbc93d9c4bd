"""DBN reference records: instrument definitions and statistics (v1-v3) as canonical tables.

Unlike the market-data records, whose layout is the same in every DBN version, these
two grew between versions (longer symbols, a 64-bit statistic quantity), so their
layout is chosen by the file's version. Undefined values (DBN's sentinels: the largest
integer of the field's type, an empty string, instrument id 0) become nulls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.schemas import EventKind

from ._dbn_records import INT64_MAX, LAYOUTS, RTYPE_SCHEMAS, Layout, records_table, venues

__all__ = ["INSTRUMENT_CLASSES", "STAT_TYPES", "decode_records", "layout_of", "rtype_schema"]

_PRICE_SCALE = 1e9
_DEFINITION, _STATISTICS = 0x13, 0x18

#: DBN ``stat_type`` code -> the ``stat_type`` name in the ``statistics`` kind.
STAT_TYPES: dict[int, str] = {
    1: "opening_price", 2: "indicative_opening_price", 3: "settlement_price",
    4: "session_low_price", 5: "session_high_price", 6: "cleared_volume", 7: "lowest_offer",
    8: "highest_bid", 9: "open_interest", 10: "fixing_price", 11: "close_price",
    12: "net_change", 13: "vwap", 14: "volatility", 15: "delta", 16: "uncrossing_price",
    17: "upper_price_limit", 18: "lower_price_limit", 19: "block_volume",
    20: "indicative_close_price", 21: "mwcb_level_1", 22: "mwcb_level_2", 23: "mwcb_level_3",
    24: "auction_collar_reference_price", 25: "auction_collar_upper_price",
    26: "auction_collar_lower_price", 10001: "venue_specific_volume_1",
    10002: "venue_specific_price_1",
}  # fmt: skip

#: DBN ``instrument_class`` character -> the ``instrument_class`` name in ``definitions``.
INSTRUMENT_CLASSES: dict[str, str] = {
    "B": "bond", "C": "call", "F": "future", "I": "index", "K": "stock", "M": "mixed_spread",
    "P": "put", "S": "future_spread", "T": "option_spread", "X": "fx_spot",
    "Y": "commodity_spot",
}  # fmt: skip
_UPDATE_ACTIONS = {"A": "add", "M": "modify", "D": "delete", "~": "invalid"}
_STAT_ACTIONS = {1: "new", 2: "delete"}

_TEXT = (
    "raw_symbol", "security_type", "asset", "exchange", "currency", "unit_of_measure",
    "underlying", "strike_price_currency",
)  # fmt: skip
_PRICES = (
    "min_price_increment", "min_price_increment_amount", "display_factor",
    "unit_of_measure_qty", "strike_price", "high_limit_price", "low_limit_price",
)  # fmt: skip


def _definition_fields(version: int) -> list[tuple[str, str, int]]:
    """``(name, numpy format, byte offset)`` of the definition fields ticktensor keeps."""
    fields = [("ts_recv", "<u8", 16), ("min_price_increment", "<i8", 24)]
    fields += [("display_factor", "<i8", 32), ("expiration", "<u8", 40)]
    fields += [("activation", "<u8", 48), ("high_limit_price", "<i8", 56)]
    fields += [("low_limit_price", "<i8", 64)]
    # (v3 offset, v2 offset, v1 offset): v2 inserted nothing before strike_price but moved
    # it up from v1's tail; v3 dropped trading_reference_price and widened asset.
    placed: list[tuple[str, str, tuple[int, int, int]]] = [
        ("unit_of_measure_qty", "<i8", (80, 88, 88)),
        ("min_price_increment_amount", "<i8", (88, 96, 96)),
        ("strike_price", "<i8", (104, 112, 328)),
        ("underlying_id", "<u4", (140, 124, 116)),
        ("contract_multiplier", "<i4", (176, 164, 160)),
        ("maturity_year", "<u2", (214, 180, 180)),
        ("currency", "S4", (224, 186, 186)),
        ("exchange", "S5", (330, 292, 243)),
        ("security_type", "S7", (353, 311, 262)),
        ("unit_of_measure", "S31", (360, 318, 269)),
        ("underlying", "S21", (391, 349, 300)),
        ("strike_price_currency", "S4", (412, 370, 321)),
        ("instrument_class", "S1", (487, 374, 325)),
        ("update_action", "S1", (493, 382, 349)),
        ("maturity_month", "u1", (494, 383, 350)),
    ]
    column = {3: 0, 2: 1, 1: 2}[version]
    fields += [(name, fmt, offsets[column]) for name, fmt, offsets in placed]
    symbol_len = 22 if version == 1 else 71
    fields.append(("raw_symbol", f"S{symbol_len}", 200 if version < 3 else 238))
    fields.append(("asset", "S11" if version == 3 else "S7", {3: 335, 2: 297, 1: 248}[version]))
    return fields


def _statistics_fields(version: int) -> list[tuple[str, str, int]]:
    # v3 widened the quantity to 64 bits, moving everything after it by 4 bytes.
    wide = version == 3
    shift = 4 if wide else 0
    return [
        ("ts_recv", "<u8", 16),
        ("ts_ref", "<u8", 24),
        ("price", "<i8", 32),
        ("quantity", "<i8" if wide else "<i4", 40),
        ("sequence", "<u4", 44 + shift),
        ("stat_type", "<u2", 52 + shift),
        ("update_action", "u1", 56 + shift),
        ("flags", "u1", 57 + shift),
    ]


def layout_of(schema: str, version: int) -> Layout | None:
    """How the records of DBN ``schema`` look in a version-``version`` file (None: unknown)."""
    if schema == "definition":
        size = {1: 360, 2: 400, 3: 520}[version]
        kinds = (EventKind.DEFINITIONS,)
        return Layout(frozenset({_DEFINITION}), _definition_fields(version), size, 0, kinds)
    if schema == "statistics":
        size = 80 if version == 3 else 64
        kinds = (EventKind.STATISTICS,)
        return Layout(frozenset({_STATISTICS}), _statistics_fields(version), size, 0, kinds)
    return LAYOUTS.get(schema)


def rtype_schema(rtype: int) -> str | None:
    """The DBN schema whose layout decodes records of type ``rtype`` (mixed streams)."""
    if rtype == _DEFINITION:
        return "definition"
    if rtype == _STATISTICS:
        return "statistics"
    return RTYPE_SCHEMAS.get(rtype)


def _undefined(values: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    return np.asarray(values == np.iinfo(values.dtype).max)


def _ts(values: npt.NDArray[np.uint64]) -> pa.Array:
    ints = pa.array(values.view(np.int64), mask=_undefined(values), type=pa.int64())
    return ints.cast(pa.timestamp("ns", "UTC"))


def _px(values: npt.NDArray[np.int64]) -> pa.Array:
    return pa.array(values / _PRICE_SCALE, mask=values == INT64_MAX, type=pa.float64())


def _int(values: npt.NDArray[Any], undefined: npt.NDArray[np.bool_]) -> pa.Array:
    return pa.array(np.ascontiguousarray(values), mask=undefined)


def _text(values: npt.NDArray[np.bytes_]) -> pa.Array:
    """NUL-padded text, decoded (invalid UTF-8 replaced), trailing blanks removed; '' -> null."""
    raw = pa.array(np.ascontiguousarray(values), type=pa.binary())  # numpy drops the NULs
    try:
        text = raw.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: decoded one by one, bad bytes replaced
        decoded = [v.decode("utf-8", "replace") for v in values.tolist()]
        text = pa.array(decoded, type=pa.string())
    text = pc.utf8_rtrim_whitespace(text)
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def _lookup(codes: npt.NDArray[Any], names: dict[int, str], unknown: str) -> pa.Array:
    """The name of each code (``unknown`` formatted with the code when it has none)."""
    distinct, inverse = np.unique(codes, return_inverse=True)
    table = [names.get(code, unknown.format(code)) for code in distinct.tolist()]
    return pa.array(table, type=pa.string()).take(pa.array(inverse.reshape(-1)))


def _named(text: pa.Array, names: dict[str, str]) -> pa.Array:
    """Codes replaced by their names; an unknown code is kept as it is."""
    codes = pa.array(list(names), type=pa.string())
    index = pc.index_in(text, codes)
    named = pc.take(pa.array(list(names.values()), type=pa.string()), index)
    return pc.coalesce(named, text)


def _definitions(rec: npt.NDArray[Any]) -> dict[str, Any]:
    cols: dict[str, Any] = {
        "instrument_id": rec["instrument_id"],
        "expiration": _ts(rec["expiration"]),
        "activation": _ts(rec["activation"]),
        "maturity_year": _int(rec["maturity_year"], _undefined(rec["maturity_year"])),
        "maturity_month": _int(rec["maturity_month"], _undefined(rec["maturity_month"])),
        "underlying_id": _int(rec["underlying_id"], rec["underlying_id"] == 0),
        "contract_multiplier": _int(
            rec["contract_multiplier"], _undefined(rec["contract_multiplier"])
        ),
    }
    cols |= {name: _text(rec[name]) for name in _TEXT}
    cols |= {name: _px(rec[name]) for name in _PRICES}
    cols["instrument_class"] = _named(_text(rec["instrument_class"]), INSTRUMENT_CLASSES)
    cols["update_action"] = _named(_text(rec["update_action"]), _UPDATE_ACTIONS)
    return cols


def _statistics(rec: npt.NDArray[Any]) -> dict[str, Any]:
    quantity = rec["quantity"]
    return {
        "instrument_id": rec["instrument_id"],
        "ts_ref": _ts(rec["ts_ref"]),
        "stat_type": _lookup(rec["stat_type"], STAT_TYPES, "stat_{}"),
        "stat_code": rec["stat_type"],
        "price": _px(rec["price"]),
        "quantity": pa.array(quantity.astype(np.float64), mask=_undefined(quantity)),
        "update_action": _lookup(rec["update_action"], _STAT_ACTIONS, "action_{}"),
        "flags": rec["flags"],
        "sequence": rec["sequence"].astype(np.uint64),
    }


def decode_records(
    rec: npt.NDArray[Any], schema: str, kind: EventKind, dataset: str, symbols: pa.Array
) -> pa.Table:
    """Records of DBN ``schema`` (decoded by ``record_dtype(layout_of(...))``) as columns
    of ``kind``, not yet cast (``cast_columns`` does that)."""
    if kind not in (EventKind.DEFINITIONS, EventKind.STATISTICS):
        return records_table(rec, schema, kind, dataset, symbols)
    cols: dict[str, Any] = {
        "ts_event": _ts(rec["ts_event"]),
        "ts_recv": _ts(rec["ts_recv"]),
        "symbol": symbols,
        "venue": venues(rec, dataset),
    }
    cols |= _definitions(rec) if kind is EventKind.DEFINITIONS else _statistics(rec)
    return pa.table(cols)
