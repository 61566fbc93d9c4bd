"""DBN record layouts: the fixed-size market-data records as numpy dtypes, and their
decoding into canonical columns (shared by whole-schema and mixed-schema files)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.schemas import EventKind

__all__ = [
    "INT64_MAX",
    "LAYOUTS",
    "RTYPE_SCHEMAS",
    "SAMPLED",
    "UINT64_MAX",
    "Layout",
    "record_dtype",
    "records_table",
    "venues",
]

INT64_MAX = np.iinfo(np.int64).max
UINT64_MAX = np.iinfo(np.uint64).max
_PRICE_SCALE = 1e9
_OHLCV_NS = {"ohlcv-1s": 10**9, "ohlcv-1m": 60 * 10**9, "ohlcv-1h": 3600 * 10**9}
_OHLCV_NS["ohlcv-1d"] = 86400 * 10**9

_HEADER = [("length", "u1", 0), ("rtype", "u1", 1), ("publisher_id", "<u2", 2)]
_HEADER += [("instrument_id", "<u4", 4)]
_HEADER += [("ts_event", "<u8", 8)]
_LEVEL = np.dtype(
    {
        "names": ["bid_px", "ask_px", "bid_sz", "ask_sz", "bid_ct", "ask_ct"],
        "formats": ["<i8", "<i8", "<u4", "<u4", "<u4", "<u4"],
        "offsets": [0, 8, 16, 20, 24, 28],
        "itemsize": 32,
    }
)
#: A consolidated level (cmbp-1, cbbo, tcbbo): publisher ids where MBP levels have counts.
_CONSOLIDATED_LEVEL = np.dtype(
    {
        "names": ["bid_px", "ask_px", "bid_sz", "ask_sz"],
        "formats": ["<i8", "<i8", "<u4", "<u4"],
        "offsets": [0, 8, 16, 20],
        "itemsize": 32,
    }
)
_TRADE = [("price", "<i8", 16), ("size", "<u4", 24), ("action", "u1", 28), ("side", "u1", 29)]
_TRADE += [("ts_recv", "<u8", 32), ("sequence", "<u4", 44)]
_MBO = [("order_id", "<u8", 16), ("price", "<i8", 24), ("size", "<u4", 32), ("flags", "u1", 36)]
_MBO += [("action", "u1", 38), ("side", "u1", 39), ("ts_recv", "<u8", 40)]
_MBO += [("sequence", "<u4", 52)]
# Consolidated records have no sequence number (cbbo has no action either: unused for quotes).
_CTRADE = [f for f in _TRADE if f[0] != "sequence"]
_OHLCV = [(name, "<i8", 16 + 8 * i) for i, name in enumerate(("open", "high", "low", "close"))]
_OHLCV += [("volume", "<u8", 48)]


#: Schemas sampled at fixed intervals: a record's time is its sample time, ``ts_recv``
#: (DBN's ``ts_event`` there is the last book update before it, undefined when none).
SAMPLED = frozenset({"bbo-1s", "bbo-1m", "cbbo-1s", "cbbo-1m"})
#: OPRA's publishers (DBN ``publisher_id`` 20-37, in order): each exchange's MIC.
_OPRA_VENUES = (
    "AMXO", "XBOX", "XCBO", "EMLD", "EDGO", "GMNI", "XISX", "MCRY", "XMIO", "ARCO", "OPRA",
    "MPRL", "XNDQ", "XBXO", "C2OX", "XPHL", "BATO", "MXOP",
)  # fmt: skip
_OPRA_FIRST = 20


def venues(rec: npt.NDArray[Any], dataset: str) -> pa.Array:
    """The ``venue`` of each record: the dataset, except in OPRA, whose records of one
    instrument and time come from several exchanges: there the publisher's MIC (a record
    of an unknown publisher: ``dataset:publisher_id``), so that they stay apart."""
    n = len(rec)
    if not dataset.startswith("OPRA") or "publisher_id" not in (rec.dtype.names or ()):
        return pa.array([dataset] * n, type=pa.string())
    ids, inverse = np.unique(rec["publisher_id"].astype(np.int64), return_inverse=True)
    known = range(_OPRA_FIRST, _OPRA_FIRST + len(_OPRA_VENUES))
    labels = [
        _OPRA_VENUES[i - _OPRA_FIRST] if i in known else f"{dataset}:{i}" for i in ids.tolist()
    ]
    codes = pa.array(inverse.astype(np.int32).reshape(-1))
    return pa.DictionaryArray.from_arrays(codes, pa.array(labels, pa.string())).cast(pa.string())


@dataclass(frozen=True)
class Layout:
    """How one DBN schema's records look: rtypes, fields, book depth and the kinds it maps to."""

    rtypes: frozenset[int]
    fields: list[tuple[str, str, int]]
    size: int
    depth: int
    kinds: tuple[EventKind, ...]  # the first is the default
    level: np.dtype[Any] = _LEVEL


_BOOK = (EventKind.QUOTES, EventKind.TRADES)
LAYOUTS: dict[str, Layout] = {
    "trades": Layout(frozenset({0x00}), _TRADE, 48, 0, (EventKind.TRADES,)),
    "tbbo": Layout(frozenset({0x01}), _TRADE, 80, 1, _BOOK),
    "mbp-1": Layout(frozenset({0x01}), _TRADE, 80, 1, (EventKind.QUOTES,)),
    "mbp-10": Layout(frozenset({0x0A}), _TRADE, 368, 10, (EventKind.MBP10, EventKind.QUOTES)),
    "mbo": Layout(frozenset({0xA0}), _MBO, 56, 0, (EventKind.MBO,)),
    "bbo-1s": Layout(frozenset({0xC3}), _TRADE, 80, 1, (EventKind.QUOTES,)),
    "bbo-1m": Layout(frozenset({0xC4}), _TRADE, 80, 1, (EventKind.QUOTES,)),
    "cmbp-1": Layout(frozenset({0xB1}), _CTRADE, 80, 1, (EventKind.QUOTES,), _CONSOLIDATED_LEVEL),
    "cbbo-1s": Layout(frozenset({0xC0}), _CTRADE, 80, 1, (EventKind.QUOTES,), _CONSOLIDATED_LEVEL),
    "cbbo-1m": Layout(frozenset({0xC1}), _CTRADE, 80, 1, (EventKind.QUOTES,), _CONSOLIDATED_LEVEL),
    "tcbbo": Layout(frozenset({0xC2}), _CTRADE, 80, 1, _BOOK, _CONSOLIDATED_LEVEL),
}
for _name, _rtype in (("ohlcv-1s", 0x20), ("ohlcv-1m", 0x21), ("ohlcv-1h", 0x22)):
    LAYOUTS[_name] = Layout(frozenset({_rtype, 0x11}), _OHLCV, 56, 0, (EventKind.OHLCV,))
LAYOUTS["ohlcv-1d"] = Layout(frozenset({0x23, 0x11}), _OHLCV, 56, 0, (EventKind.OHLCV,))

#: Record type -> the DBN schema whose layout decodes it (mixed-schema files).
RTYPE_SCHEMAS: dict[int, str] = {
    0x00: "trades", 0x01: "mbp-1", 0x0A: "mbp-10", 0xA0: "mbo", 0x20: "ohlcv-1s",
    0x21: "ohlcv-1m", 0x22: "ohlcv-1h", 0x23: "ohlcv-1d", 0xC3: "bbo-1s", 0xC4: "bbo-1m",
    0xB1: "cmbp-1", 0xC0: "cbbo-1s", 0xC1: "cbbo-1m", 0xC2: "tcbbo",
}  # fmt: skip


def record_dtype(layout: Layout, itemsize: int) -> np.dtype[Any]:
    """The numpy dtype of ``layout``'s records of ``itemsize`` bytes (``ts_out`` adds 8)."""
    fields = _HEADER + layout.fields
    names, formats, offsets = [f[0] for f in fields], [f[1] for f in fields], [f[2] for f in fields]
    formats_any: list[Any] = list(formats)
    if layout.depth:
        names.append("levels")
        formats_any.append((layout.level, (layout.depth,)))
        offsets.append(48)
    spec = {"names": names, "formats": formats_any, "offsets": offsets, "itemsize": itemsize}
    return np.dtype(spec)  # type: ignore[call-overload, no-any-return]


def _ts(values: npt.NDArray[np.uint64]) -> pa.Array:
    mask = values == UINT64_MAX
    ints = pa.array(values.view(np.int64), mask=mask, type=pa.int64())
    return ints.cast(pa.timestamp("ns", "UTC"))


def _px(values: npt.NDArray[np.int64]) -> pa.Array:
    return pa.array(values / _PRICE_SCALE, mask=values == INT64_MAX, type=pa.float64())


def _level(values: npt.NDArray[Any], px: npt.NDArray[np.int64]) -> pa.Array:
    """Size or count of a book level; null where the level is empty (undefined price)."""
    return pa.array(np.ascontiguousarray(values), mask=px == INT64_MAX)


def _side(chars: npt.NDArray[np.uint8]) -> npt.NDArray[np.int8]:
    """'B' bid/buy -> +1, 'A' ask/sell -> -1, anything else ('N') -> 0."""
    side: npt.NDArray[np.int8] = np.zeros(len(chars), dtype=np.int8)
    side[chars == ord("B")] = 1
    side[chars == ord("A")] = -1
    return side


def _chars(values: npt.NDArray[np.uint8]) -> pa.Array:
    """One-byte codes as text; a non-ASCII byte (corrupt) becomes ``?``, which no rule accepts."""
    ascii_ = np.where(values < 0x80, values, ord("?")).astype(np.uint8)
    return pa.array(ascii_.view("S1"), type=pa.binary()).cast(pa.string())


def records_table(
    rec: npt.NDArray[Any], schema: str, kind: EventKind, dataset: str, symbols: pa.Array
) -> pa.Table:
    """Records of DBN ``schema`` (decoded by :func:`record_dtype`) as columns of ``kind``
    (not yet cast: :func:`~ticktensor.schemas.cast_columns` does that)."""
    layout = LAYOUTS[schema]
    ts_event = rec["ts_recv"] if schema in SAMPLED else rec["ts_event"]
    cols: dict[str, Any] = {"ts_event": _ts(ts_event)}
    if kind is not EventKind.OHLCV:
        cols["ts_recv"] = _ts(rec["ts_recv"])
    cols["symbol"] = symbols
    cols["venue"] = venues(rec, dataset)
    if kind is EventKind.OHLCV:
        interval = _OHLCV_NS[schema]
        cols["interval_ns"] = np.full(len(rec), interval, dtype=np.int64)
        for name in ("open", "high", "low", "close"):
            cols[name] = _px(rec[name])
        cols["volume"] = rec["volume"].astype(np.float64)
        return pa.table(cols)
    if "sequence" in (rec.dtype.names or ()):
        cols["sequence"] = rec["sequence"].astype(np.uint64)
    if kind is EventKind.QUOTES:
        top = rec["levels"][:, 0]
        for side in ("bid", "ask"):
            px = top[f"{side}_px"]
            cols[f"{side}_px"] = _px(px)
            cols[f"{side}_sz"] = _level(top[f"{side}_sz"].astype(np.float64), px)
            if f"{side}_ct" in (top.dtype.names or ()):
                cols[f"{side}_ct"] = _level(top[f"{side}_ct"], px)
        return pa.table(cols)
    cols["price"] = _px(rec["price"])
    cols["size"] = rec["size"].astype(np.float64)
    cols["side"] = _side(rec["side"])
    if kind is EventKind.TRADES:
        return pa.table(cols)
    cols["action"] = _chars(rec["action"])
    if kind is EventKind.MBO:
        cols["order_id"] = rec["order_id"]
        cols["flags"] = rec["flags"]
        return pa.table(cols)
    levels = rec["levels"]
    for side in ("bid", "ask"):
        for i in range(layout.depth):
            px = levels[f"{side}_px"][:, i]
            cols[f"{side}_px_{i:02d}"] = _px(px)
            sz = levels[f"{side}_sz"][:, i].astype(np.float64)
            cols[f"{side}_sz_{i:02d}"] = _level(sz, px)
            cols[f"{side}_ct_{i:02d}"] = _level(levels[f"{side}_ct"][:, i], px)
    return pa.table(cols)
