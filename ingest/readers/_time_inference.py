"""Time inference: the unit of epoch numbers from their magnitude, the layout of text times.

Decided once per file from its first timestamp (:func:`infer_time`), then applied to
every row, so a file is read one way throughout and inference costs nothing per row.

- **Epoch numbers**: the unit that puts the value between 1973 and 5138:
  ``|v| >= 1e17`` ns, ``>= 1e14`` µs, ``>= 1e11`` ms, ``>= 1e8`` s. Smaller numbers
  (times before 1973 in every unit) are read as ns, the unit of the canonical schemas.
- **Text**: ISO 8601 with an offset (``Z``, ``+02:00``) is converted to UTC; ISO 8601
  without one is local time in ``CsvFormat.timezone`` (UTC by default). Other layouts
  are tried from :data:`TEXT_FORMATS` (HistData ``20200101 170000065``, MetaTrader
  ``2024.01.02 10:00``, Dukascopy ``02.01.2024 10:00:00.000``, ...); the first that
  reads the value is used for the whole file.

An explicit ``CsvFormat.ts_unit`` or ``ts_format`` skips inference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ConfigError

from ._base import CsvFormat, TsUnit

__all__ = ["TEXT_FORMATS", "UNIT_NS", "TimeReading", "epoch_unit", "infer_time", "strptime"]

#: Nanoseconds in one of each epoch unit :func:`epoch_unit` names.
UNIT_NS: dict[str, int] = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}

#: Text layouts tried, in order, when a time is neither a number nor ISO 8601.
TEXT_FORMATS: tuple[str, ...] = (
    "%Y%m%d %H%M%S%f",
    "%Y%m%d %H%M%S",
    "%Y%m%d %H:%M:%S.%f",
    "%Y%m%d %H:%M:%S",
    "%Y%m%d %H:%M",
    "%Y%m%d",
    "%Y.%m.%d %H:%M:%S.%f",
    "%Y.%m.%d %H:%M:%S",
    "%Y.%m.%d %H:%M",
    "%Y.%m.%d",
    "%Y/%m/%d %H:%M:%S.%f",
    "%Y/%m/%d %H:%M:%S",
    "%Y/%m/%d %H:%M",
    "%Y/%m/%d",
    "%d.%m.%Y %H:%M:%S.%f",
    "%d.%m.%Y %H:%M:%S",
    "%d.%m.%Y %H:%M",
    "%d.%m.%Y",
)

_OFFSET = re.compile(r"(Z|[+-]\d\d:?\d\d)$")
_NUMBER = re.compile(r"^\s*[+-]?\d+(\.\d*)?\s*$")
_LIMITS: tuple[tuple[float, TsUnit], ...] = ((1e17, "ns"), (1e14, "us"), (1e11, "ms"), (1e8, "s"))
_DIGITS = {"Y": r"\d{4}", "m": r"\d{2}", "d": r"\d{2}", "H": r"\d{2}"}
_DIGITS |= {"M": r"\d{2}", "S": r"\d{2}", "y": r"\d{2}", "j": r"\d{3}"}


@dataclass(frozen=True)
class TimeReading:
    """How one file's timestamps are read: epoch ``unit`` or text ``format``, and why."""

    unit: TsUnit
    format: str | None
    note: str


def epoch_unit(value: float) -> TsUnit:
    """The unit that makes ``value`` a time between 1973 and 5138 (ns below that).

    Examples
    --------
    >>> epoch_unit(1_723_161_600_000), epoch_unit(1.7e9), epoch_unit(1_723_161_600_000_000)
    ('ms', 's', 'us')
    """
    magnitude = abs(value)
    return next((unit for limit, unit in _LIMITS if magnitude >= limit), "ns")


def _is_iso(value: str) -> bool:
    type_ = pa.timestamp("ns", "UTC") if _OFFSET.search(value) else pa.timestamp("ns")
    try:
        pc.cast(pa.array([value]), type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def infer_time(first: object, fmt: CsvFormat, *, is_date: bool = False) -> TimeReading:
    """How to read a file's timestamps, from its first value ``first``.

    ``is_date`` says the column is a calendar date (``20240102`` is then a date, not a
    number of ns).
    """
    if fmt.ts_format is not None:
        return TimeReading(fmt.ts_unit or "ns", fmt.ts_format, f"text as {fmt.ts_format!r}")
    text = first.strip() if isinstance(first, str) else None
    numeric = isinstance(first, int | float) or (
        text is not None and _NUMBER.match(text) is not None
    )
    if numeric and not is_date:
        if fmt.ts_unit is not None:
            return TimeReading(fmt.ts_unit, None, f"{fmt.ts_unit} since the epoch")
        value = float(first) if isinstance(first, int | float) else float(str(first).strip())
        unit = epoch_unit(value)
        return TimeReading(unit, None, f"{unit} since the epoch (from the magnitude)")
    unit = fmt.ts_unit or "ns"
    zone = f"naive times in {fmt.timezone}"
    if text is None or not text:
        return TimeReading(unit, None, "ISO 8601 text")
    if _is_iso(text):
        if _OFFSET.search(text):
            return TimeReading(unit, None, "ISO 8601 text with a UTC offset")
        return TimeReading(unit, None, f"ISO 8601 text, {zone}")
    for layout in TEXT_FORMATS:
        if strptime(pa.array([text]), layout).null_count == 0:
            return TimeReading(unit, layout, f"text as {layout!r}, {zone}")
    return TimeReading(
        unit,
        None,
        f"ISO 8601 text, {zone} (first value {text!r} is not: give its layout with --ts-format)",
    )


def strptime(text: pa.Array, format_: str) -> pa.Array:
    """``strptime`` to naive ``timestamp[ns]`` with ``%f`` (1-9 fraction digits), which
    Arrow lacks; values that do not match become null."""
    if "%f" not in format_:
        return pc.strptime(text, format=format_, unit="ns", error_is_null=True)
    head, _, tail = format_.partition("%f")
    pattern = f"^(?P<head>{_regex(head)})(?P<frac>\\d{{1,9}})(?P<tail>{_regex(tail)})$"
    parts = pc.extract_regex(text, pattern)
    base = pc.binary_join_element_wise(
        pc.struct_field(parts, "head"), pc.struct_field(parts, "tail"), ""
    )
    seconds = pc.strptime(base, format=head + tail, unit="ns", error_is_null=True)
    frac = pc.cast(pc.utf8_rpad(pc.struct_field(parts, "frac"), 9, "0"), pa.int64())
    ns = pc.add(pc.cast(seconds, pa.int64()), frac)
    return pc.cast(pc.if_else(pc.is_valid(parts), ns, None), pa.timestamp("ns"))


def _regex(format_: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(format_):
        if format_[i] == "%" and i + 1 < len(format_):
            code = format_[i + 1]
            if code not in _DIGITS and code != "%":
                raise ConfigError(
                    f"time format {format_!r}: %{code} cannot be combined with %f "
                    f"(supported with %f: %{' %'.join(_DIGITS)})"
                )
            out.append(_DIGITS.get(code, "%"))
            i += 2
        else:
            out.append(re.escape(format_[i]))
            i += 1
    return "".join(out)
