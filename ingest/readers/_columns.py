"""Column plans: map a tabular file's columns onto a canonical schema and normalize them.

Shared by the CSV, Parquet and Arrow readers. A :class:`ColumnPlan` says which file
column feeds each canonical column (``CsvFormat.columns`` first, then the canonical name
itself) and which constants fill the rest; :func:`convert` turns a table of file
columns into canonical columns and reports, per column, the rows whose value could
not be decoded (those rows become rejects, never silent nulls).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ConfigError, SchemaError
from ticktensor.schemas import EventKind, null_column, parse_duration_ns, schema_for

from ._base import Inference, ReadOptions
from ._names import DATE_NAMES, book_update_columns, match_columns, normalize
from ._time_inference import TimeReading, infer_time, strptime

__all__ = [
    "NULL_VALUES",
    "Bad",
    "ColumnPlan",
    "convert",
    "plan_columns",
    "resolve_time",
    "safe_cast",
]

#: Field texts that mean "no value" in non-string columns (CSV reading and fallback).
# "NaN"/"nan" are not nulls: a NaN price must reach validation (rule "finite").
NULL_VALUES = ["", "NA", "N/A", "NULL", "null", "None"]

_TS = pa.timestamp("ns", tz="UTC")
_UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_PRICE_NAMES = {"price", "bid_px", "ask_px", "open", "high", "low", "close", "vwap"}
_OFFSET = r"(Z|[+-]\d\d:?\d\d)$"
_DECIMAL = r"^\s*(?P<int>[+-]?\d+)(?:\.(?P<frac>\d{0,9})\d*)?\s*$"
_INTERVAL = re.compile(r"(?:^|[_\-.])(\d+)(s|m|min|h|d)(?=$|[_\-.])")
#: Vendor file names that carry the instrument, with the vendor's name for the layout.
_NAMED_SYMBOL: tuple[tuple[re.Pattern[str], str], ...] = (
    # Databento / Nautilus exports: SYMBOL.MIC_1min_bars_... (a four-letter ISO 10383 MIC).
    (re.compile(r"^(?P<symbol>[A-Z0-9]{1,21})\.(?P<venue>[A-Z]{4})_"), "SYMBOL.MIC_"),
    # Dukascopy: EURUSD_Candlestick_1_M_BID_... or EURUSD_Ticks_...
    (re.compile(r"^(?P<symbol>[A-Z0-9]{3,12})_(?:Candlestick|Ticks)_"), "Dukascopy"),
    # HistData: DAT_ASCII_EURUSD_M1_2020.csv
    (re.compile(r"^DAT_(?:ASCII|MT|NT|XLSX)_(?P<symbol>[A-Z0-9]{3,12})_"), "HistData"),
)
#: Kinds whose rows mean nothing without one of these columns (all of them nullable).
_ONE_OF: dict[EventKind, tuple[str, ...]] = {
    EventKind.QUOTES: ("bid_px", "ask_px"),
    EventKind.MBP10: ("bid_px_00", "ask_px_00"),
}


def is_price(name: str) -> bool:
    """Whether canonical column ``name`` holds a price (scaled by ``price_scale``)."""
    return name in _PRICE_NAMES or "_px_" in name


@dataclass(frozen=True)
class Bad:
    """Rows of one column whose value could not be decoded."""

    column: str
    mask: npt.NDArray[np.bool_]
    values: pa.Array
    reason: str
    rule: str = "unparseable"


@dataclass(frozen=True)
class ColumnPlan:
    """Where each canonical column of ``kind`` comes from in one file.

    ``sources`` maps canonical names to file columns (given, spelled canonically, or
    recognised by :func:`~ticktensor.ingest.readers._names.match_columns`); ``ts_time``
    is a time-of-day column joined to the ``ts_event`` date column; ``constants`` fills
    canonical columns the file lacks (``symbol`` from ``ReadOptions.symbol``, ``side``
    0 = unknown, ``interval_ns`` from ``ReadOptions.interval_ns`` or a bar length in the
    file name such as ``_1m``). ``time`` is how timestamps are read (set once per file
    by :func:`resolve_time`); ``notes`` explain the choices for the ingest report.
    """

    kind: EventKind
    sources: dict[str, str]
    constants: dict[str, object]
    options: ReadOptions
    ts_time: str | None = None
    time: TimeReading | None = None
    notes: tuple[str, ...] = ()
    interval_from: str = "inferred from the timestamps"
    #: File columns no canonical column takes (listed in the report, never silently).
    unused: tuple[str, ...] = ()
    #: Constants taken from the file name (a note of their own says so).
    from_name: tuple[str, ...] = ()

    @property
    def file_columns(self) -> list[str]:
        """The file columns to read, each once, in canonical order."""
        extra = [self.ts_time] if self.ts_time else []
        return list(dict.fromkeys([*self.sources.values(), *extra]))

    @property
    def bar_interval_open(self) -> bool:
        """Whether bars have a constant (not per-row) length, to check or infer."""
        return self.kind is EventKind.OHLCV and "interval_ns" not in self.sources

    def inference(self, *extra: str) -> Inference:
        """The mapping and notes for the ingest report (``extra``: more notes)."""
        columns = {c: self.sources[c] for c in schema_for(self.kind).names if c in self.sources}
        if self.ts_time:
            columns["ts_event"] = f"{self.sources['ts_event']} + {self.ts_time}"
        time = [f"ts_event: {self.time.note}"] if self.time else []
        given = [
            f"{name}: {value!r} for every row (no column)"
            for name, value in self.constants.items()
            if name != "interval_ns" and name not in self.from_name
        ]
        unused = [f"not stored (no {self.kind.value} column takes them): {self.unused_names()}"]
        return Inference(
            columns, (*time, *given, *self.notes, *(unused if self.unused else ()), *extra)
        )

    def unused_names(self) -> str:
        """The columns not stored, as the file names them (0-based fields without a
        header)."""
        if all(c.isdigit() for c in self.unused):
            return "fields " + ", ".join(self.unused) + " (0-based)"
        return str(list(self.unused))


def plan_columns(
    kind: EventKind, available: Sequence[str], options: ReadOptions, source: str
) -> ColumnPlan:
    """Resolve canonical columns of ``kind`` against a file's ``available`` columns.

    Raises
    ------
    ConfigError
        When ``CsvFormat.columns`` names a canonical column ``kind`` does not have.
    SchemaError
        Naming a mapped column the file lacks, or a required column with no source,
        and listing the file's columns.
    """
    schema = schema_for(kind)
    mapping = options.csv.columns
    if unknown := sorted(set(mapping) - set(schema.names)):
        raise ConfigError(
            f"column mapping names {unknown}, not columns of {kind.value}: {schema.names}"
        )
    for name, column in mapping.items():
        if column not in available:
            raise SchemaError(
                f"{source}: column {column!r} (mapped to {name!r}) is not in "
                f"the file; its columns are {list(available)}"
            )
    marks = book_update_columns(available)
    if marks and kind not in (EventKind.MBP10, EventKind.MBO):
        raise SchemaError(
            f"{source}: the columns {list(available)} are order-book updates (one price "
            f"level per row, with {marks}), not {kind.value}; reading them as {kind.value} "
            "would invent a row per level change. Binance futures depth files "
            "(update_type snap/set) are read by --format binance; convert other book "
            "updates to mbp10 or mbo first"
        )
    matched = match_columns(kind, available, mapping, source)
    sources = matched.sources
    constants: dict[str, object] = {}
    notes: list[str] = []
    interval_from = "inferred from the timestamps"
    if kind is EventKind.OHLCV and "interval_ns" not in mapping:
        given = options.interval_ns
        if given is not None:
            sources.pop("interval_ns", None)
            constants["interval_ns"] = given
            interval_from = "--interval"
        elif "interval_ns" not in sources and (interval := _interval_from_name(source)):
            constants["interval_ns"] = interval
            interval_from = "from the file name"
    if kind is EventKind.OHLCV and "volume" not in sources:
        notes.append("volume: no column, null (features that need volume are NaN)")
    named_constants: set[str] = set()
    if "symbol" not in sources and options.symbol is None:
        named = symbol_from_name(source)
        if named is not None:
            symbol, venue, vendor = named
            constants["symbol"] = symbol
            said = f"symbol: {symbol!r} for every row (from the file name, {vendor} naming"
            if venue is not None and "venue" not in sources:
                constants["venue"] = venue
                said += f"; venue {venue!r}"
            notes.append(said + "; --symbol overrides)")
            named_constants |= {"symbol", "venue"} & constants.keys()
    missing: list[str] = []
    for field in schema:
        name = field.name
        if name in sources or name in constants:
            continue
        if name == "symbol" and options.symbol is not None:
            constants[name] = options.symbol
        elif name == "side":
            constants[name] = 0
        elif name == "interval_ns":
            continue  # from the timestamps: see _bar_grid
        elif not field.nullable:
            missing.append(name)
    if missing:
        hint = " (or give the symbol: --symbol / ReadOptions.symbol)" if "symbol" in missing else ""
        raise SchemaError(
            f"{source}: no column for required {kind.value} column(s) {missing}; map them "
            f"with --columns NAME=COLUMN,... (CsvFormat.columns){hint}. "
            f"The file's columns are {list(available)}"
        )
    needed = _ONE_OF.get(kind, ())
    if needed and not set(needed) & set(sources):
        raise SchemaError(
            f"{source}: {kind.value} needs a {' or '.join(needed)} column and the file has "
            f"neither; its columns are {list(available)}. Map them with --columns "
            f"{needed[0]}=COLUMN,... or pick the schema the file holds (--schema)"
        )
    used = {*sources.values(), *([matched.ts_time] if matched.ts_time else [])}
    unused = tuple(c for c in available if c not in used)
    return ColumnPlan(
        kind,
        sources,
        constants,
        options,
        matched.ts_time,
        notes=tuple(notes),
        interval_from=interval_from,
        unused=unused,
        from_name=tuple(c for c in ("symbol", "venue") if c in named_constants),
    )


def symbol_from_name(source: str) -> tuple[str, str | None, str] | None:
    """The symbol (and venue) a vendor's file name carries, with the vendor's naming.

    Examples
    --------
    >>> symbol_from_name("data/6EH4.XCME_1min_bars_20240102.csv.gz")
    ('6EH4', 'XCME', 'SYMBOL.MIC_')
    >>> symbol_from_name("bars_1min.csv") is None
    True
    """
    base = source.rsplit("/", 1)[-1]
    for pattern, vendor in _NAMED_SYMBOL:
        if (found := pattern.match(base)) is not None:
            return found["symbol"], found.groupdict().get("venue"), vendor
    return None


def resolve_time(plan: ColumnPlan, first: object, time_part: object = None) -> ColumnPlan:
    """``plan`` with how its timestamps are read, decided from the file's first one.

    ``first`` is the first ``ts_event`` value (text, number or None), ``time_part`` the
    first value of the time-of-day column of a date + time file.
    """
    column = plan.sources.get("ts_event")
    if column is None:
        return plan
    if plan.ts_time is not None:
        first = f"{first} {time_part}"
    is_date = plan.ts_time is None and normalize(column) in DATE_NAMES
    reading = infer_time(first, plan.options.csv, is_date=is_date)
    return replace(plan, time=reading)


def _interval_from_name(source: str) -> int | None:
    stem = source.rsplit("/", 1)[-1].rsplit(".", 1)[0].lower()
    found = _INTERVAL.findall(stem)
    if not found:
        return None
    amount, unit = found[-1]
    try:
        return parse_duration_ns(amount + ("m" if unit == "min" else unit))
    except ConfigError:  # a zero length ("_0s") names no bar length
        return None


def safe_cast(array: pa.Array, type_: pa.DataType) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Cast ``array`` to ``type_``; values that do not cast become null and flagged.

    The whole array is cast at once when it can be; otherwise halves are retried, so
    a few bad values cost a few extra casts, not a per-value Python loop.
    """
    bad = np.zeros(len(array), dtype=bool)
    return _cast_halving(array, type_, bad, 0), bad


def _cast_halving(
    array: pa.Array, type_: pa.DataType, bad: npt.NDArray[np.bool_], start: int
) -> pa.Array:
    try:
        return pc.cast(array, type_, safe=True)
    except pa.ArrowInvalid:
        if len(array) == 1:
            bad[start] = True
            return pa.nulls(1, type_)
    half = len(array) // 2
    left = _cast_halving(array.slice(0, half), type_, bad, start)
    right = _cast_halving(array.slice(half), type_, bad, start + half)
    return pa.concat_arrays([left, right])


def convert(table: pa.Table, plan: ColumnPlan) -> tuple[pa.Table, list[Bad]]:
    """Normalize ``table`` (file columns) into the canonical columns of ``plan.kind``.

    Returns the canonical table (every field nullable, like
    :func:`ticktensor.schemas.cast_columns`) and the undecodable values.
    """
    schema = schema_for(plan.kind)
    n = table.num_rows
    columns: list[pa.Array | pa.ChunkedArray] = []
    bads: list[Bad] = []
    for field in schema:
        if field.name in plan.constants:
            value = pa.scalar(plan.constants[field.name], field.type)
            columns.append(pa.repeat(value, n))
            continue
        if field.name not in plan.sources:
            columns.append(null_column(n, field.type))
            continue
        source = table.column(plan.sources[field.name])
        label = plan.sources[field.name]
        if field.name == "ts_event" and plan.ts_time is not None:
            label = f"{label} + {plan.ts_time}"
            time = pc.cast(table.column(plan.ts_time), pa.string())
            source = pc.binary_join_element_wise(pc.cast(source, pa.string()), time, " ")
        array, mask, reason = _convert_column(field.name, field.type, source, plan)
        if mask is not None and mask.any():
            bads.append(Bad(label, mask, source.combine_chunks(), reason))
        columns.append(array)
    fields = [field.with_nullable(True) for field in schema]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=schema.metadata)), bads


_Converted = tuple[pa.Array | pa.ChunkedArray, npt.NDArray[np.bool_] | None, str]


def _convert_column(
    name: str, type_: pa.DataType, source: pa.ChunkedArray, plan: ColumnPlan
) -> _Converted:
    fmt = plan.options.csv
    kind = source.type
    if pa.types.is_timestamp(type_):
        return _to_timestamp(source, plan)
    if name == "side":
        return _map_side(source, fmt.side_map)
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if text and not pa.types.is_string(type_):
        source = pc.if_else(pc.is_in(source, pa.array(NULL_VALUES)), None, source)
    try:
        array = pc.cast(source, type_, safe=True)
        mask = None
    except pa.ArrowNotImplementedError:
        raise SchemaError(
            f"column {plan.sources[name]!r} ({source.type}) cannot become {name!r} ({type_})"
        ) from None
    except pa.ArrowInvalid:
        array, mask = safe_cast(source.combine_chunks(), type_)
    if is_price(name) and fmt.price_scale != 1.0:
        array = pc.multiply(array, fmt.price_scale)
    return array, mask, f"is not a valid {type_}"


def _map_side(source: pa.ChunkedArray, side_map: Mapping[str, int]) -> _Converted:
    """Map side labels through ``side_map`` by their dictionary, chunk by chunk."""
    table = dict(side_map)
    chunks: list[pa.Array] = []
    masks: list[npt.NDArray[np.bool_]] = []
    for chunk in source.chunks:
        array = chunk if pa.types.is_dictionary(chunk.type) else _encode(chunk)
        labels = [str(v) for v in array.dictionary.to_pylist()]
        codes = pa.array([table.get(label) for label in labels], pa.int8())
        sides = pc.take(codes, array.indices)
        known = pc.is_valid(sides)
        if array.null_count:  # a missing side (Parquet null) is the empty label's side
            empty = pa.scalar(table.get("", 0), pa.int8())
            sides = pc.if_else(pc.is_null(array.indices), empty, sides)
            known = pc.or_(known, pc.is_null(array.indices))
        chunks.append(sides)
        # All labels known is the usual case: skip the slow Arrow-to-numpy bool copy.
        all_known = pc.all(known).as_py() is not False
        masks.append(np.zeros(len(sides), dtype=bool) if all_known else ~np.asarray(known))
    mask = np.concatenate(masks) if masks else np.zeros(0, dtype=bool)
    result = pa.chunked_array(chunks, pa.int8())
    return result, (mask if mask.any() else None), f"is not in the side map {sorted(table)}"


def _encode(chunk: pa.Array) -> pa.DictionaryArray:
    if not pa.types.is_string(chunk.type):
        chunk = pc.cast(chunk, pa.string())
    return pc.dictionary_encode(chunk)


def _to_timestamp(source: pa.ChunkedArray, plan: ColumnPlan) -> _Converted:
    fmt = plan.options.csv
    reading = plan.time or infer_time(None, fmt)
    unit, ts_format = reading.unit, reading.format
    kind = source.type
    reason = "is not a timestamp"
    if pa.types.is_timestamp(kind):
        if kind.tz is None:
            return _localize(source, fmt.timezone), None, reason
        return pc.cast(source, _TS), None, reason
    if pa.types.is_integer(kind):
        return _int_to_ns(pc.cast(source, pa.int64()), unit)
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return _float_to_ns(pc.cast(source, pa.float64()), _UNIT_NS[unit]), None, reason
    text = pc.cast(source.combine_chunks(), pa.string())
    if ts_format is None:
        try:  # the common case, integer epoch units, without the regex path below
            whole = pc.cast(text, pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        else:
            return _int_to_ns(whole, unit)
    if ts_format is not None:
        parsed = strptime(text, ts_format)
        reason = f"does not match the time format {ts_format!r}"
    elif _looks_numeric(text):
        parsed = _decimal_ns(text, _UNIT_NS[unit])
        reason = f"is not a number of {unit} since the epoch"
    elif pc.all(pc.match_substring_regex(text, _OFFSET)).as_py():
        return (*safe_cast(text, _TS), "is not an ISO 8601 time")
    else:
        parsed, _ = safe_cast(text, pa.timestamp("ns"))
        reason = (
            "is not an ISO 8601 time without offset nor a layout ticktensor recognises; "
            "give its layout with --ts-format (e.g. '%m/%d/%Y %H:%M')"
        )
    mask = np.asarray(pc.and_(pc.is_null(parsed), pc.is_valid(text)))
    if pa.types.is_timestamp(parsed.type) and parsed.type.tz is None:
        parsed = _localize(parsed, fmt.timezone)
    elif not pa.types.is_timestamp(parsed.type):
        parsed = pc.cast(parsed, _TS)
    return parsed, mask, reason


def _int_to_ns(ints: pa.Array | pa.ChunkedArray, unit: str) -> _Converted:
    """Integer times in ``unit`` as UTC ns timestamps.

    A value whose ns do not fit in int64 (the unit is inferred from the file's first
    time, so a later one can be far larger) becomes null and is flagged: its row is
    quarantined, as the text path does with out-of-range numbers.
    """
    reason = f"is out of the range of ns timestamps as {unit} since the epoch"
    if unit == "ns":  # ns needs no product: spare a copy of the column
        return pc.cast(ints, _TS), None, reason
    scale = pa.scalar(_UNIT_NS[unit], pa.int64())
    try:
        return pc.cast(pc.multiply_checked(ints, scale), _TS), None, reason
    except pa.ArrowInvalid:  # an overflow: find the values, not the common case's cost
        limit = np.iinfo(np.int64).max // _UNIT_NS[unit]
        out = pc.fill_null(pc.or_(pc.greater(ints, limit), pc.less(ints, -limit)), False)
        kept = pc.if_else(out, pa.scalar(None, pa.int64()), ints)
        mask = np.asarray(out, dtype=bool)
        return pc.cast(pc.multiply_checked(kept, scale), _TS), mask, reason


def _float_to_ns(values: pa.ChunkedArray, unit_ns: int) -> pa.ChunkedArray:
    """Float times in units of ``unit_ns`` as UTC ns, whole units and fraction apart: the
    whole units convert exactly and the fraction (exact in float64) rounds to the ns, where
    one product of epoch ns in float64 would round to 256 ns."""
    whole = pc.floor(values)
    fraction = pc.round(pc.multiply(pc.subtract(values, whole), float(unit_ns)))
    ns = pc.add_checked(
        pc.multiply_checked(pc.cast(whole, pa.int64()), pa.scalar(unit_ns, pa.int64())),
        pc.cast(fraction, pa.int64()),
    )
    return pc.cast(ns, _TS)


def _localize(naive: pa.Array | pa.ChunkedArray, timezone: str) -> pa.Array | pa.ChunkedArray:
    naive = pc.cast(naive, pa.timestamp("ns"))
    if timezone == "UTC":
        return pc.cast(naive, _TS)
    local = pc.assume_timezone(naive, timezone, ambiguous="earliest", nonexistent="earliest")
    return pc.cast(local, _TS)


def _looks_numeric(text: pa.Array) -> bool:
    first = pc.drop_null(text)[:100].to_pylist()
    return any(re.match(_DECIMAL, value) for value in first)


def _decimal_ns(text: pa.Array, unit_ns: int) -> pa.Array:
    """Exact ns from decimal text in ``unit_ns`` units (no float rounding)."""
    parts = pc.extract_regex(text, _DECIMAL)
    # Out-of-range values (more digits than int64 holds, or past int64 ns) become null:
    # the caller flags nulls as "not a timestamp", so the row is quarantined, not lost.
    whole, _ = safe_cast(
        pc.struct_field(parts, "int").combine_chunks()
        if isinstance(parts, pa.ChunkedArray)
        else pc.struct_field(parts, "int"),
        pa.int64(),
    )
    limit = np.iinfo(np.int64).max // unit_ns - 1
    whole = pc.if_else(pc.less_equal(pc.abs(whole), limit), whole, None)
    frac = pc.utf8_rpad(pc.struct_field(parts, "frac"), 9, "0")
    frac_ns = pc.divide(pc.multiply(pc.cast(frac, pa.int64()), unit_ns), 10**9)
    sign = pc.if_else(pc.starts_with(pc.struct_field(parts, "int"), "-"), -1, 1)
    ns = pc.add(pc.multiply(whole, unit_ns), pc.multiply(sign, frac_ns))
    return pc.if_else(pc.is_valid(parts), ns, None)
