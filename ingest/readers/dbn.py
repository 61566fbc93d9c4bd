"""Databento DBN (v1-v3): a vectorized decoder of fixed-size records into canonical events."""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ticktensor.errors import ConfigError, InputError
from ticktensor.ingest._sources import Input
from ticktensor.ingest.readers._base import REJECT_SCHEMA, EventBatch, Reader, ReadOptions
from ticktensor.schemas import EventKind, schema_for
from ticktensor.schemas._conform import cast_columns

__all__ = ["DbnReader"]

INT64_MAX = np.iinfo(np.int64).max
UINT64_MAX = np.iinfo(np.uint64).max
_PRICE_SCALE = 1e9
#: Largest metadata header accepted (symbol mappings of a whole venue fit many times over).
MAX_METADATA_BYTES = 64 << 20
_SCHEMA_NAMES = {
    0: "mbo", 1: "mbp-1", 2: "mbp-10", 3: "tbbo", 4: "trades", 5: "ohlcv-1s", 6: "ohlcv-1m",
    7: "ohlcv-1h", 8: "ohlcv-1d", 9: "definition", 10: "statistics", 11: "status",
    12: "imbalance", 13: "ohlcv-eod", 14: "cmbp-1", 15: "cbbo-1s", 16: "cbbo-1m", 17: "tcbbo",
    18: "bbo-1s", 19: "bbo-1m",
}  # fmt: skip
_OHLCV_NS = {"ohlcv-1s": 10**9, "ohlcv-1m": 60 * 10**9, "ohlcv-1h": 3600 * 10**9}
_OHLCV_NS["ohlcv-1d"] = 86400 * 10**9

_HEADER = [("length", "u1", 0), ("rtype", "u1", 1), ("instrument_id", "<u4", 4)]
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


@dataclass(frozen=True)
class _Layout:
    """How one DBN schema's records look: rtypes, fields, book depth and the kinds it maps to."""

    rtypes: frozenset[int]
    fields: list[tuple[str, str, int]]
    size: int
    depth: int
    kinds: tuple[EventKind, ...]  # the first is the default
    level: np.dtype[Any] = _LEVEL


_BOOK = (EventKind.QUOTES, EventKind.TRADES)
_LAYOUTS: dict[str, _Layout] = {
    "trades": _Layout(frozenset({0x00}), _TRADE, 48, 0, (EventKind.TRADES,)),
    "tbbo": _Layout(frozenset({0x01}), _TRADE, 80, 1, _BOOK),
    "mbp-1": _Layout(frozenset({0x01}), _TRADE, 80, 1, (EventKind.QUOTES,)),
    "mbp-10": _Layout(frozenset({0x0A}), _TRADE, 368, 10, (EventKind.MBP10, EventKind.QUOTES)),
    "mbo": _Layout(frozenset({0xA0}), _MBO, 56, 0, (EventKind.MBO,)),
    "bbo-1s": _Layout(frozenset({0xC3}), _TRADE, 80, 1, (EventKind.QUOTES,)),
    "bbo-1m": _Layout(frozenset({0xC4}), _TRADE, 80, 1, (EventKind.QUOTES,)),
    "cmbp-1": _Layout(frozenset({0xB1}), _CTRADE, 80, 1, (EventKind.QUOTES,), _CONSOLIDATED_LEVEL),
    "cbbo-1s": _Layout(frozenset({0xC0}), _CTRADE, 80, 1, (EventKind.QUOTES,), _CONSOLIDATED_LEVEL),
    "cbbo-1m": _Layout(frozenset({0xC1}), _CTRADE, 80, 1, (EventKind.QUOTES,), _CONSOLIDATED_LEVEL),
    "tcbbo": _Layout(frozenset({0xC2}), _CTRADE, 80, 1, _BOOK, _CONSOLIDATED_LEVEL),
}
for _name, _rtype in (("ohlcv-1s", 0x20), ("ohlcv-1m", 0x21), ("ohlcv-1h", 0x22)):
    _LAYOUTS[_name] = _Layout(frozenset({_rtype, 0x11}), _OHLCV, 56, 0, (EventKind.OHLCV,))
_LAYOUTS["ohlcv-1d"] = _Layout(frozenset({0x23, 0x11}), _OHLCV, 56, 0, (EventKind.OHLCV,))


@dataclass(frozen=True)
class _Metadata:
    version: int
    dataset: str
    schema: str | None
    ts_out: bool
    #: instrument_id -> [(start ns, end ns, symbol)] from the metadata symbol mappings.
    symbols: dict[int, list[tuple[int, int, str]]]
    length: int  # bytes up to the first record


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _date_ns(yyyymmdd: int) -> int:
    day = dt.date(yyyymmdd // 10000, yyyymmdd // 100 % 100, yyyymmdd % 100)
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()) * 10**9


def _read_metadata(stream: IO[bytes], url: str) -> _Metadata:
    """Parse the metadata header (DBN v1, v2 and v3 share all but the reserved tail)."""
    prelude = stream.read(8)
    if len(prelude) < 8 or prelude[:3] != b"DBN":
        raise ConfigError(f"{url}: not a DBN file (starts with {prelude[:8]!r})")
    version, (length,) = prelude[3], struct.unpack("<I", prelude[4:8])
    if version not in (1, 2, 3):
        raise ConfigError(f"{url}: DBN version {version} is not supported (1, 2, 3 are)")
    if length > MAX_METADATA_BYTES:
        raise InputError(
            f"{url}: DBN metadata length {length:,} bytes exceeds the {MAX_METADATA_BYTES >> 20} "
            "MiB limit (corrupt header?)"
        )
    body = stream.read(length)
    if len(body) < length:
        raise ConfigError(f"{url}: DBN metadata truncated ({len(body)} of {length} bytes)")
    try:
        return _parse_metadata(version, length, body)
    except (struct.error, ValueError, OverflowError) as exc:
        raise InputError(f"{url}: DBN metadata is corrupt ({exc})") from None


def _parse_metadata(version: int, length: int, body: bytes) -> _Metadata:
    dataset = _cstr(body[:16])
    (schema_id,) = struct.unpack_from("<H", body, 16)
    pos = 16 + 2 + 24 + (8 if version == 1 else 0)  # dataset, schema, start/end/limit, count
    ts_out = bool(body[pos + 2])
    cstr_len = 22 if version == 1 else struct.unpack_from("<H", body, pos + 3)[0]
    pos += 3 + (47 if version == 1 else 55)
    (schema_def,) = struct.unpack_from("<I", body, pos)
    pos += 4 + schema_def
    for _ in range(3):  # symbols, partial, not_found
        (count,) = struct.unpack_from("<I", body, pos)
        pos += 4 + count * cstr_len
    (n_mappings,) = struct.unpack_from("<I", body, pos)
    pos += 4
    symbols: dict[int, list[tuple[int, int, str]]] = {}
    for _ in range(n_mappings):
        raw_symbol = _cstr(body[pos : pos + cstr_len])
        (n_intervals,) = struct.unpack_from("<I", body, pos + cstr_len)
        pos += cstr_len + 4
        for _ in range(n_intervals):
            start, end = struct.unpack_from("<II", body, pos)
            mapped = _cstr(body[pos + 8 : pos + 8 + cstr_len])
            pos += 8 + cstr_len
            # One side of the mapping is the numeric instrument id, the other the name.
            iid, name = (mapped, raw_symbol) if mapped.isdigit() else (raw_symbol, mapped)
            if iid.isdigit():
                span = (_date_ns(start), _date_ns(end), name)
                symbols.setdefault(int(iid), []).append(span)
    schema = None if schema_id == 0xFFFF else _SCHEMA_NAMES.get(schema_id, f"#{schema_id}")
    return _Metadata(version, dataset, schema, ts_out, symbols, 8 + length)


def _record_dtype(layout: _Layout, itemsize: int) -> np.dtype[Any]:
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


class DbnReader(Reader):
    """Databento Binary Encoding files (``.dbn``, ``.dbn.zst``), versions 1 to 3.

    Records are decoded in blocks of whole records with numpy structured dtypes (no
    per-record Python). Schema mapping: ``trades`` -> trades; ``mbp-1``, ``bbo-1s``,
    ``bbo-1m``, and the consolidated ``cmbp-1``, ``cbbo-1s``, ``cbbo-1m`` -> quotes;
    ``tbbo``/``tcbbo`` -> quotes (the book just before each trade) or trades with
    ``kind=trades``; ``mbp-10`` -> mbp10 (or quotes from level 0);
    ``mbo`` -> mbo; ``ohlcv-1s/1m/1h/1d`` -> ohlcv. Other schemas raise ConfigError.
    """

    name = "dbn"
    suffixes = (".dbn",)

    @classmethod
    def sniff(cls, name: str, head: bytes) -> bool:
        """Whether ``head`` starts with the DBN magic bytes."""
        return head[:3] == b"DBN"

    def read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        """Decode ``source`` in batches of at most ``options.batch_rows`` records."""
        with source.open() as stream:
            meta = _read_metadata(stream, source.url)
            layout = _LAYOUTS.get(meta.schema or "")
            if layout is None:
                supported = ", ".join(_LAYOUTS)
                raise ConfigError(
                    f"{source.url}: DBN schema {meta.schema or 'mixed'!r} has no canonical "
                    f"ticktensor schema; supported: {supported}"
                )
            kind = options.kind or layout.kinds[0]
            if kind not in layout.kinds:
                raise ConfigError(
                    f"{source.url}: requested kind {kind.value!r} but the DBN schema is "
                    f"{meta.schema!r}, which maps to {', '.join(k.value for k in layout.kinds)}"
                )
            yield from self._records(stream, source.url, meta, layout, kind, options)

    def _records(
        self,
        stream: IO[bytes],
        url: str,
        meta: _Metadata,
        layout: _Layout,
        kind: EventKind,
        options: ReadOptions,
    ) -> Iterator[EventBatch]:
        size = layout.size + (8 if meta.ts_out else 0)
        dtype = _record_dtype(layout, size)
        offset, record, pending = meta.length, 0, b""  # byte offset and number of pending[0]
        while True:
            chunk = stream.read(options.batch_rows * size - len(pending))
            buf = pending + chunk
            whole = len(buf) // size * size
            if whole:
                records = np.frombuffer(buf, dtype=dtype, count=whole // size)
                lengths = records["length"].astype(np.int64) * 4
                bad = (lengths != size) | ~np.isin(records["rtype"], list(layout.rtypes))
                if bad.any():  # a foreign record breaks the fixed stride: say where
                    i = int(np.argmax(bad))
                    raise ConfigError(
                        f"{url}: record {record + i + 1} at byte offset {offset + i * size} has "
                        f"rtype 0x{records['rtype'][i]:02x} and length "
                        f"{lengths[i]}; expected a {meta.schema} record of "
                        f"{size} bytes (mixed-record DBN streams are not supported)"
                    )
                rows = np.arange(record + 1, record + 1 + len(records), dtype=np.int64)
                table = self._table(records, meta, layout, kind, options)
                yield EventBatch(kind, cast_columns(table, kind), rows)
                offset, record = offset + whole, record + len(records)
            pending = buf[whole:]
            if not chunk:
                break
        if pending:
            message = (
                f"{url} record {record + 1} at byte offset {offset}: truncated record "
                f"({len(pending)} of {size} bytes; rule: unparseable)"
            )
            reject = {"row": [record + 1], "column": [None], "value": [pending.hex()]}
            reject |= {"rule": ["unparseable"], "message": [message], "raw": [None]}
            rejects = pa.table(reject, schema=REJECT_SCHEMA)
            empty = cast_columns(schema_for(kind).empty_table(), kind)
            yield EventBatch(kind, empty, np.empty(0, dtype=np.int64), rejects=rejects)

    def _table(
        self,
        rec: npt.NDArray[Any],
        meta: _Metadata,
        layout: _Layout,
        kind: EventKind,
        options: ReadOptions,
    ) -> pa.Table:
        ts_event = rec["ts_event"]
        has_recv = "ts_recv" in (rec.dtype.names or ())
        mapping_ts = rec["ts_recv"] if has_recv else ts_event
        cols: dict[str, Any] = {"ts_event": _ts(ts_event)}
        if kind is not EventKind.OHLCV:
            cols["ts_recv"] = _ts(rec["ts_recv"])
        cols["symbol"] = self._symbols(rec["instrument_id"], mapping_ts, meta, options)
        cols["venue"] = pa.array([meta.dataset] * len(rec), type=pa.string())
        if kind is EventKind.OHLCV:
            interval = _OHLCV_NS[meta.schema or ""]
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

    @staticmethod
    def _symbols(
        iids: npt.NDArray[np.uint32],
        ts: npt.NDArray[np.uint64],
        meta: _Metadata,
        options: ReadOptions,
    ) -> pa.Array:
        """Symbol per record: the metadata mapping valid on the record's date, else a fallback."""
        out = np.empty(len(iids), dtype=object)
        for iid in np.unique(iids):
            rows = iids == iid
            out[rows] = options.symbol or str(iid)
            for start, end, name in meta.symbols.get(int(iid), []):
                day = ts.astype(np.int64)  # UINT64_MAX (undefined) wraps negative: no match
                out[rows & (day >= start) & (day < end)] = name
        return pa.array(out, type=pa.string())
