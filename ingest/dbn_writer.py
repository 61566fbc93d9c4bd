"""Writing DBN: canonical trades and quotes as Databento binary files (demo and tests).

The metadata header comes from the ``databento-dbn`` package's own encoder; records are
laid out with numpy structured arrays in the DBN v3 layouts (``trades``: 48 bytes,
``mbp-1``: 80 bytes), prices as int64 in 1e-9 units. Every symbol gets an instrument id
and a symbol mapping valid for the data's dates.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ConfigError
from ticktensor.schemas import EventKind

__all__ = ["encode_dbn"]

_RECORD = {
    EventKind.TRADES: ("trades", 0x00, 48),
    EventKind.QUOTES: ("mbp-1", 0x01, 80),
}
_SIDE = {1: ord("B"), -1: ord("A"), 0: ord("N")}
UNDEF_PRICE = np.iinfo(np.int64).max


@dataclass(frozen=True)
class _Interval:
    start_date: dt.date
    end_date: dt.date
    symbol: str


@dataclass(frozen=True)
class _Mapping:
    """A symbol mapping in the shape ``databento_dbn.Metadata`` reads (attributes)."""

    raw_symbol: str
    intervals: list[_Interval]


def _dtype(size: int) -> np.dtype[np.void]:
    names = ["length", "rtype", "publisher_id", "instrument_id", "ts_event", "price", "size"]
    names += ["action", "side", "flags", "depth", "ts_recv", "ts_in_delta", "sequence"]
    formats = ["u1", "u1", "<u2", "<u4", "<u8", "<i8", "<u4", "u1", "u1", "u1", "u1", "<u8"]
    formats += ["<i4", "<u4"]
    offsets = [0, 1, 2, 4, 8, 16, 24, 28, 29, 30, 31, 32, 40, 44]
    if size == 80:
        names += ["bid_px", "ask_px", "bid_sz", "ask_sz", "bid_ct", "ask_ct"]
        formats += ["<i8", "<i8", "<u4", "<u4", "<u4", "<u4"]
        offsets += [48, 56, 64, 68, 72, 76]
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})


def _fixed(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Prices to int64 1e-9 fixed point; null -> the undefined price."""
    raw = pc.fill_null(pc.cast(values, pa.float64()), np.nan).to_numpy(zero_copy_only=False)
    out = np.full(raw.shape, UNDEF_PRICE, dtype=np.int64)
    ok = np.isfinite(raw)
    out[ok] = np.round(raw[ok] * 1e9).astype(np.int64)
    return out


def _ints(values: pa.ChunkedArray | pa.Array, dtype: str) -> np.ndarray:
    out: np.ndarray = pc.fill_null(values, 0).to_numpy(zero_copy_only=False).astype(dtype)
    return out


def encode_dbn(table: pa.Table, kind: EventKind, *, dataset: str = "XSYN.DEMO") -> bytes:
    """``table`` (canonical trades or quotes, sorted by ``ts_event``) as DBN bytes.

    Examples
    --------
    >>> from ticktensor.ingest import SyntheticMarket, generate_day
    >>> market = SyntheticMarket(symbols=("X",), quotes_per_day=50, trades_per_day=10)
    >>> trades = generate_day(market, "X", market.days[0])[EventKind.TRADES]
    >>> encode_dbn(trades, EventKind.TRADES)[:3]
    b'DBN'
    """
    import databento_dbn as db

    if kind not in _RECORD:
        raise ConfigError(f"DBN encoding supports trades and quotes, not {kind.value}")
    schema_name, rtype, size = _RECORD[kind]
    n = table.num_rows
    ts = table.column("ts_event").cast(pa.int64()).to_numpy()
    symbols: Sequence[str] = table.column("symbol").to_pylist()
    names = sorted(set(symbols))
    ids = {name: 1000 + i for i, name in enumerate(names)}
    records = np.zeros(n, dtype=_dtype(size))
    records["length"] = size // 4
    records["rtype"] = rtype
    records["publisher_id"] = 1
    records["instrument_id"] = np.array([ids[s] for s in symbols], dtype=np.uint32)
    records["ts_event"] = ts
    recv = table.column("ts_recv") if "ts_recv" in table.column_names else None
    records["ts_recv"] = (
        ts if recv is None or recv.null_count == n else _ints(recv.cast(pa.int64()), "<u8")
    )
    if "sequence" in table.column_names:
        records["sequence"] = _ints(table.column("sequence"), "<u4")
    if kind is EventKind.TRADES:
        records["price"] = _fixed(table.column("price"))
        records["size"] = _ints(table.column("size"), "<u4")
        side = _ints(table.column("side"), "i1")
        records["action"] = ord("T")
    else:
        records["price"] = UNDEF_PRICE
        records["bid_px"] = _fixed(table.column("bid_px"))
        records["ask_px"] = _fixed(table.column("ask_px"))
        records["bid_sz"] = _ints(table.column("bid_sz"), "<u4")
        records["ask_sz"] = _ints(table.column("ask_sz"), "<u4")
        records["depth"] = 0
        side = np.zeros(n, dtype="i1")
        records["action"] = ord("A")
    records["side"] = np.vectorize(_SIDE.get, otypes=[np.uint8])(side) if n else side
    start = int(ts.min()) if n else 0
    end = int(ts.max()) + 1 if n else 1
    first = dt.datetime.fromtimestamp(start // 10**9, tz=dt.UTC).date()
    last = dt.datetime.fromtimestamp((end - 1) // 10**9, tz=dt.UTC).date()
    mappings = [
        _Mapping(name, [_Interval(first, last + dt.timedelta(days=1), str(ids[name]))])
        for name in names
    ]
    # databento-dbn's stubs type the enum members and mappings loosely: pass them as Any.
    fields: dict[str, Any] = {
        "dataset": dataset,
        "start": start,
        "stype_in": db.SType.RAW_SYMBOL,
        "stype_out": db.SType.INSTRUMENT_ID,
        "schema": db.Schema.from_str(schema_name),
        "symbols": names,
        "partial": [],
        "not_found": [],
        "mappings": mappings,
        "end": end,
    }
    metadata = db.Metadata(**fields)
    return bytes(metadata.encode()) + records.tobytes()
