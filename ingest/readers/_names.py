"""Column names: the common spellings of each canonical column, and the kind a header implies.

A vendor file rarely names its columns ``ts_event`` or ``bid_px``. :func:`match_columns`
finds, for each canonical column of a kind, the one file column whose *normalized* name
(lower case, camelCase split, any run of other characters an underscore, ``<>`` and
quotes dropped: ``"Bid Price"``, ``bidPrice`` and ``<BID_PRICE>`` all read ``bid_price``)
is one of that column's :data:`SYNONYMS`. Two file columns that both qualify make the
file ambiguous: a :class:`~ticktensor.errors.SchemaError` names the candidates and the
``--columns`` flag that settles it. A ``date`` column together with a ``time`` column
make the event time (``date`` + ``" "`` + ``time``).

:func:`kind_from_columns` picks the canonical schema a header describes (``open``,
``high``, ``low``, ``close`` -> ohlcv; ``bid``, ``ask`` -> quotes; ``price`` and a size
-> trades; ...).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ticktensor.errors import SchemaError
from ticktensor.schemas import EventKind, schema_for

__all__ = [
    "DATE_NAMES",
    "SYNONYMS",
    "Matched",
    "book_update_columns",
    "kind_from_columns",
    "match_columns",
    "normalize",
]

#: Canonical column -> normalized file column names that mean it, most specific first.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "ts_event": (
        "timestamp", "time", "ts", "datetime", "date_time", "timestamp_utc", "time_utc",
        "datetime_utc", "utc_time", "utc", "event_time", "transact_time", "trade_time",
        "open_time", "time_open", "bar_time", "gmt_time", "time_gmt", "date_gmt",
        "datetime_gmt", "timestamp_gmt", "date_time_gmt", "gmt", "date_utc", "t",
    ),
    "ts_recv": (
        "local_timestamp", "local_time", "recv_time", "receive_time", "received",
        "ts_local", "ts_recv_ns", "recv_timestamp", "capture_time",
    ),
    "symbol": (
        "ticker", "instrument", "pair", "sym", "instrument_name", "security", "contract",
        "product", "market_symbol",
    ),
    "venue": ("exchange", "market", "mic"),
    "price": ("px", "last", "last_price", "trade_price", "last_px", "p"),
    "size": ("qty", "quantity", "amount", "volume", "sz", "trade_size", "last_size",
             "last_qty", "q"),
    "side": ("aggressor", "aggressor_side", "taker_side", "direction", "buy_sell"),
    "trade_id": ("id", "tid", "trade_no", "match_id", "exec_id"),
    "bid_px": ("bid", "bid_price", "best_bid", "best_bid_price", "bidprice", "bid_px_00", "b"),
    "ask_px": ("ask", "ask_price", "best_ask", "best_ask_price", "askprice", "offer",
               "offer_price", "ask_px_00", "a"),
    "bid_sz": ("bid_size", "bid_qty", "bid_quantity", "bid_amount", "bid_volume", "bidsize",
               "best_bid_qty", "best_bid_size", "bid_sz_00"),
    "ask_sz": ("ask_size", "ask_qty", "ask_quantity", "ask_amount", "ask_volume", "asksize",
               "best_ask_qty", "best_ask_size", "offer_size", "offer_qty", "ask_sz_00"),
    "open": ("o", "open_price", "first", "opening_price"),
    "high": ("h", "high_price", "max", "highest_price"),
    "low": ("l", "low_price", "min", "lowest_price"),
    "close": ("c", "close_price", "last", "closing_price", "last_price"),
    "volume": ("v", "vol", "qty", "quantity", "base_volume", "tick_volume", "size",
               "volume_base"),
    "trade_count": ("trades", "count", "num_trades", "n_trades", "number_of_trades",
                    "trade_num", "tick_count"),
    "vwap": ("vw", "average", "avg_price", "average_price", "wap"),
    "sequence": ("seq", "seq_num", "seqnum", "sequence_number", "seq_no"),
    "order_id": ("order", "oid", "order_no", "order_ref"),
}  # fmt: skip

#: Normalized names of a calendar-date column, joined with a ``time`` column when both exist.
DATE_NAMES: tuple[str, ...] = ("date", "day", "trade_date", "trading_day", "dt")
_TIME_PART = ("time", "time_of_day", "clock")

#: Canonical columns that tell a kind apart, most specific kind first.
_SIGNATURES: tuple[tuple[EventKind, tuple[str, ...]], ...] = (
    (EventKind.MBP10, ("bid_px_00", "ask_px_00")),
    (EventKind.MBO, ("order_id", "action")),
    (EventKind.OHLCV, ("open", "high", "low", "close")),
    (EventKind.QUOTES, ("bid_px", "ask_px")),
    (EventKind.TRADES, ("price", "size")),
)

#: Columns that only order-book updates have: a row is a change to one price level.
_BOOK_UPDATE_MARKS = ("update_type", "first_update_id", "last_update_id", "is_snapshot")
_LEVEL_QUANTITY = ("qty", "quantity", "amount", "size")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_OTHER = re.compile(r"[^a-z0-9]+")


def normalize(name: str) -> str:
    """The comparable spelling of a column name: ``"Bid Price"`` -> ``"bid_price"``.

    Examples
    --------
    >>> normalize("bidPrice"), normalize("<CLOSE>"), normalize(" Open Time ")
    ('bid_price', 'close', 'open_time')
    """
    name = _CAMEL.sub("_", name.strip().strip("\"'<>"))
    return _OTHER.sub("_", name.lower()).strip("_")


@dataclass(frozen=True)
class Matched:
    """Canonical column -> file column, found by name; ``ts_time`` is a separate time column.

    ``inferred`` lists the canonical columns found through a synonym rather than given
    by ``--columns`` or spelled canonically.
    """

    sources: dict[str, str]
    ts_time: str | None
    inferred: tuple[str, ...]


def _candidates(canonical: str, available: Sequence[str], taken: set[str]) -> list[str]:
    names = (canonical, *SYNONYMS.get(canonical, ()))
    found = [c for c in available if c not in taken and normalize(c) in names]
    # A column spelled canonically but in another case ("TS_EVENT") is the one meant.
    exact = [c for c in found if normalize(c) == canonical]
    return exact or found


def match_columns(
    kind: EventKind, available: Sequence[str], mapping: Mapping[str, str], source: str
) -> Matched:
    """Find the file column of each canonical column of ``kind`` that ``mapping`` leaves open.

    Raises
    ------
    SchemaError
        When two file columns qualify for one canonical column, naming both and the
        ``--columns`` entry that picks one.
    """
    names = schema_for(kind).names
    sources = {c: mapping[c] for c in names if c in mapping}
    sources |= {c: c for c in names if c not in sources and c in available}
    taken = set(sources.values())
    inferred: list[str] = []
    ts_time: str | None = None
    if "ts_event" not in sources:
        dates = [c for c in available if c not in taken and normalize(c) in DATE_NAMES]
        times = [c for c in available if c not in taken and normalize(c) in _TIME_PART]
        if len(dates) == 1 and len(times) == 1:
            sources["ts_event"], ts_time = dates[0], times[0]
            taken |= {dates[0], times[0]}
            inferred.append("ts_event")
    for canonical in names:
        if canonical in sources:
            continue
        found = _candidates(canonical, available, taken)
        if canonical == "ts_event" and not found:
            found = [c for c in available if c not in taken and normalize(c) in DATE_NAMES]
        if len(found) > 1:
            raise SchemaError(
                f"{source}: ambiguous {kind.value} column {canonical!r}: the file has "
                f"{found}, each a usual name for it; pick one with --columns "
                f"{canonical}={found[0]} (CsvFormat.columns)"
            )
        if found:
            sources[canonical] = found[0]
            taken.add(found[0])
            inferred.append(canonical)
    return Matched(sources, ts_time, tuple(inferred))


def kind_from_columns(available: Sequence[str], mapping: Mapping[str, str]) -> EventKind | None:
    """The canonical kind a header describes, by the columns it (or ``mapping``) provides.

    Examples
    --------
    >>> kind_from_columns(["timestamp", "bid", "ask"], {}).value
    'quotes'
    >>> kind_from_columns(["Date", "Open", "High", "Low", "Close"], {}).value
    'ohlcv'
    """
    provided = set(mapping)
    normalized = {normalize(c) for c in available}
    for _, signature in _SIGNATURES:
        provided |= {c for c in signature if normalized & {c, *SYNONYMS.get(c, ())}}
    for kind, signature in _SIGNATURES:
        if set(signature) <= provided:
            return kind
    return None


def book_update_columns(available: Sequence[str]) -> list[str]:
    """The columns that make a header one of order-book updates (empty: it is not).

    A book-update row changes one price level (``side``, ``price``, quantity) and carries
    an update id or type (``update_type``, ``first_update_id``, ``is_snapshot``); read as
    trades it would invent a trade per level change.

    Examples
    --------
    >>> book_update_columns(["symbol", "timestamp", "first_update_id", "last_update_id",
    ...                      "side", "update_type", "price", "qty", "pu"])
    ['first_update_id', 'last_update_id', 'update_type']
    >>> book_update_columns(["time", "price", "qty", "side"])
    []
    """
    normalized = {normalize(c): c for c in available}
    marks = sorted(normalized[m] for m in _BOOK_UPDATE_MARKS if m in normalized)
    level = "side" in normalized and "price" in normalized
    level = level and any(q in normalized for q in _LEVEL_QUANTITY)
    return marks if marks and level else []
