"""Canonical Arrow schemas of events: market data (trades, quotes, MBP-10, MBO, OHLCV bars)
and instrument reference data (definitions, statistics).

Every vendor format is normalized into one of these schemas before validation and
storage. Conventions shared by all of them:

- timestamps are ``timestamp[ns, tz=UTC]`` (int64 nanoseconds since the UNIX epoch);
  ``ts_event`` is the exchange/engine time (required), ``ts_recv`` the capture time
  (nullable; bars have none);
- prices and sizes are ``float64``, descaled from vendor fixed point (sizes are
  fractional in crypto); an undefined vendor price becomes null;
- ``side`` is ``int8``: +1 buy/bid, -1 sell/ask, 0 none/unknown;
- ``action`` is one character: A add, C cancel, M modify, T trade, F fill, R clear;
- the reference kinds (:data:`REFERENCE_KINDS`) describe instruments rather than the
  market: they are stored as tables of a version and joined as of ``ts_recv`` to
  features, never a source of bars or features themselves.

See ``docs/schemas.md`` for the field tables and the vendor scale table.
"""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa

from ticktensor.errors import SchemaError

__all__ = [
    "ACTIONS",
    "MBP_DEPTH",
    "REFERENCE_KINDS",
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_KEY",
    "EventKind",
    "event_kind",
    "schema_for",
]

SCHEMA_VERSION = 1
"""Version of the canonical event schemas; bumped on any incompatible change."""

SCHEMA_VERSION_KEY = b"ticktensor.schema_version"
_KIND_KEY = b"ticktensor.kind"

MBP_DEPTH = 10
"""Number of book levels per side in the MBP-10 schema."""

ACTIONS: dict[str, str] = {
    "A": "add",
    "C": "cancel",
    "M": "modify",
    "T": "trade",
    "F": "fill",
    "R": "clear book",
}
"""Order-book event actions (MBO and MBP-10 ``action`` column)."""

_TS = pa.timestamp("ns", tz="UTC")
_NS_UTC = "ns since UNIX epoch, UTC"


class EventKind(StrEnum):
    """The kinds of market events ticktensor stores, one canonical schema each."""

    TRADES = "trades"
    QUOTES = "quotes"
    MBP10 = "mbp10"
    MBO = "mbo"
    OHLCV = "ohlcv"
    DEFINITIONS = "definitions"
    STATISTICS = "statistics"


REFERENCE_KINDS: frozenset[EventKind] = frozenset({EventKind.DEFINITIONS, EventKind.STATISTICS})
"""Kinds of instrument reference data: stored as tables, never a source of features."""


def _field(
    name: str, type_: pa.DataType, description: str, *, required: bool = False, unit: str = ""
) -> pa.Field:
    meta = {b"description": description.encode()}
    if unit:
        meta[b"unit"] = unit.encode()
    return pa.field(name, type_, nullable=not required, metadata=meta)


def _header(*, bars: bool = False) -> list[pa.Field]:
    event = "bar open time (start of the interval)" if bars else "event time at the exchange"
    fields = [
        _field(
            "ts_event",
            _TS,
            event,
            required=True,
            unit="ns since UNIX epoch, UTC",
        ),
    ]
    if not bars:  # a bar is computed, not captured: it has no receive time
        fields.append(
            _field(
                "ts_recv",
                _TS,
                "capture time at the recording host",
                unit="ns since UNIX epoch, UTC",
            )
        )
    fields += [
        _field("symbol", pa.string(), "instrument symbol as the vendor names it", required=True),
        _field("venue", pa.string(), "trading venue (MIC or vendor dataset code)"),
    ]
    return fields


def _sequence() -> pa.Field:
    return _field("sequence", pa.uint64(), "venue/feed sequence number")


def _side(description: str) -> pa.Field:
    return _field(
        "side", pa.int8(), description + ": +1 buy/bid, -1 sell/ask, 0 none/unknown", required=True
    )


def _action() -> pa.Field:
    codes = ", ".join(f"{k} {v}" for k, v in ACTIONS.items())
    return _field("action", pa.string(), f"book event action ({codes})", required=True)


def _levels() -> list[pa.Field]:
    fields: list[pa.Field] = []
    for quantity, type_, what in (
        ("px", pa.float64(), "price"),
        ("sz", pa.float64(), "aggregate size"),
        ("ct", pa.uint32(), "order count"),
    ):
        for book_side, word in (("bid", "bid"), ("ask", "ask")):
            fields += [
                _field(
                    f"{book_side}_{quantity}_{level:02d}",
                    type_,
                    f"{word} {what} at level {level} (0 = best); null if the level is empty",
                )
                for level in range(MBP_DEPTH)
            ]
    return fields


def _instrument_id() -> pa.Field:
    return _field("instrument_id", pa.uint32(), "the venue's or vendor's numeric instrument id")


def _build(kind: EventKind, fields: list[pa.Field]) -> pa.Schema:
    return pa.schema(
        fields,
        metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode(), _KIND_KEY: kind.value.encode()},
    )


_SCHEMAS: dict[EventKind, pa.Schema] = {
    EventKind.TRADES: _build(
        EventKind.TRADES,
        [
            *_header(),
            _field("price", pa.float64(), "trade price", required=True, unit="quote currency"),
            _field("size", pa.float64(), "traded quantity", required=True, unit="base units"),
            _side("aggressor side"),
            _field("trade_id", pa.string(), "venue trade identifier"),
            _sequence(),
        ],
    ),
    EventKind.QUOTES: _build(
        EventKind.QUOTES,
        [
            *_header(),
            _field("bid_px", pa.float64(), "best bid price; null if the bid side is empty"),
            _field("ask_px", pa.float64(), "best ask price; null if the ask side is empty"),
            _field("bid_sz", pa.float64(), "size at the best bid"),
            _field("ask_sz", pa.float64(), "size at the best ask"),
            _field("bid_ct", pa.uint32(), "order count at the best bid"),
            _field("ask_ct", pa.uint32(), "order count at the best ask"),
            _sequence(),
        ],
    ),
    EventKind.MBP10: _build(
        EventKind.MBP10,
        [
            *_header(),
            _action(),
            _side("side of the book event"),
            _field("price", pa.float64(), "price of the book event; null if undefined"),
            _field("size", pa.float64(), "size of the book event"),
            *_levels(),
            _sequence(),
        ],
    ),
    EventKind.MBO: _build(
        EventKind.MBO,
        [
            *_header(),
            _field("order_id", pa.uint64(), "venue order identifier", required=True),
            _action(),
            _side("side of the order"),
            _field("price", pa.float64(), "order price; null if undefined (e.g. clear)"),
            _field("size", pa.float64(), "order size after/of the event", required=True),
            _field("flags", pa.uint8(), "vendor event flags (e.g. DBN F_LAST, F_SNAPSHOT)"),
            _sequence(),
        ],
    ),
    EventKind.OHLCV: _build(
        EventKind.OHLCV,
        [
            *_header(bars=True),
            _field("interval_ns", pa.int64(), "bar length", required=True, unit="ns"),
            _field("open", pa.float64(), "first trade price in the bar", required=True),
            _field("high", pa.float64(), "highest trade price in the bar", required=True),
            _field("low", pa.float64(), "lowest trade price in the bar", required=True),
            _field("close", pa.float64(), "last trade price in the bar", required=True),
            _field("volume", pa.float64(), "traded quantity in the bar; null if not reported"),
            _field("trade_count", pa.uint64(), "number of trades in the bar"),
            _field("vwap", pa.float64(), "volume-weighted average price in the bar"),
        ],
    ),
    EventKind.DEFINITIONS: _build(
        EventKind.DEFINITIONS,
        [
            *_header(),
            _instrument_id(),
            _field("raw_symbol", pa.string(), "the instrument's symbol in the definition itself"),
            _field("update_action", pa.string(), "what the definition does: add, modify, delete"),
            _field(
                "instrument_class",
                pa.string(),
                "call, put, future, stock, bond, index, mixed_spread, future_spread, "
                "option_spread, fx_spot, commodity_spot",
            ),
            _field("security_type", pa.string(), "the venue's security type (FUT, OOF, ...)"),
            _field("asset", pa.string(), "underlying asset code or product (ES, AAPL, ...)"),
            _field("exchange", pa.string(), "exchange (MIC) listing the instrument"),
            _field("expiration", _TS, "last eligible trade time", unit=_NS_UTC),
            _field("activation", _TS, "time of instrument activation", unit=_NS_UTC),
            _field("maturity_year", pa.uint16(), "year of the contract month"),
            _field("maturity_month", pa.uint8(), "month of the contract month (1-12)"),
            _field("strike_price", pa.float64(), "option strike price", unit="strike currency"),
            _field("strike_price_currency", pa.string(), "currency of the strike price"),
            _field("underlying", pa.string(), "symbol of the underlying instrument"),
            _field("underlying_id", pa.uint32(), "instrument id of the underlying"),
            _field("currency", pa.string(), "currency of prices"),
            _field("min_price_increment", pa.float64(), "tick size", unit="quote currency"),
            _field(
                "min_price_increment_amount",
                pa.float64(),
                "value of one tick of one contract",
                unit="currency",
            ),
            _field("display_factor", pa.float64(), "multiplier from prices to display prices"),
            _field("unit_of_measure", pa.string(), "unit of the contract size (IPNT, BBL, ...)"),
            _field("unit_of_measure_qty", pa.float64(), "contract size in unit_of_measure"),
            _field("contract_multiplier", pa.int32(), "number of deliverables per contract"),
            _field("high_limit_price", pa.float64(), "upper price limit"),
            _field("low_limit_price", pa.float64(), "lower price limit"),
        ],
    ),
    EventKind.STATISTICS: _build(
        EventKind.STATISTICS,
        [
            *_header(),
            _instrument_id(),
            _field("ts_ref", _TS, "time the statistic refers to", unit=_NS_UTC),
            _field(
                "stat_type",
                pa.string(),
                "what the statistic is (settlement_price, open_interest, cleared_volume ...)",
                required=True,
            ),
            _field("stat_code", pa.uint16(), "the vendor's numeric code of stat_type"),
            _field("price", pa.float64(), "value of a price statistic; null if not a price"),
            _field("quantity", pa.float64(), "value of a quantity statistic; null if not one"),
            _field("update_action", pa.string(), "new (a value) or delete (withdraws one)"),
            _field("flags", pa.uint8(), "vendor statistic flags"),
            _sequence(),
        ],
    ),
}


def schema_for(kind: EventKind | str) -> pa.Schema:
    """Return the canonical Arrow schema of an event kind.

    Parameters
    ----------
    kind
        An :class:`EventKind` or its string value (``"trades"``, ``"quotes"``,
        ``"mbp10"``, ``"mbo"``, ``"ohlcv"``, ``"definitions"``, ``"statistics"``).

    Returns
    -------
    pyarrow.Schema
        Fields with descriptions in their metadata; schema metadata carries
        ``ticktensor.schema_version`` and ``ticktensor.kind``.

    Raises
    ------
    SchemaError
        If ``kind`` names no event kind.

    Examples
    --------
    >>> schema_for("trades").field("price").type
    DataType(double)
    """
    return _SCHEMAS[event_kind(kind)]


def event_kind(kind: EventKind | str) -> EventKind:
    """Coerce a string to :class:`EventKind`, raising SchemaError naming the choices."""
    try:
        return EventKind(kind)
    except ValueError:
        choices = ", ".join(repr(k.value) for k in EventKind)
        raise SchemaError(f"unknown event kind {kind!r}; expected one of {choices}") from None
