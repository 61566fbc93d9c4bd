"""Binance public data dumps (data.binance.vision): the column layout of each kind of file.

A dump is named ``SYMBOL-KIND-YYYY-MM[-DD].csv`` (``BTCUSDT-trades-2024-08-08.csv``,
``BTCUSDT-1m-2024-08-08.csv`` for klines). Spot files have no header; futures files
have one; the layouts below are Binance's documented column lists, told apart by the
number of fields (spot files add ``is_best_match``). The generic CSV reader does the
reading, with the layout as its column mapping, so rejects and row numbers are the same;
``bookDepth`` snapshots have their own reader (:mod:`._binance_depth`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ConfigError
from ticktensor.ingest._sources import Input
from ticktensor.schemas import EventKind

from ._base import EventBatch, Inference, ReadOptions
from ._binance_depth import read_book_depth
from ._layout_hints import layout_hint, shell_quoted
from .csv import CsvReader

__all__ = ["DUMP_NAME", "Layout", "layout_of", "read_dump"]

#: ``SYMBOL-KIND-DATE.csv``: a Binance daily or monthly dump.
DUMP_NAME = re.compile(
    r"^(?P<symbol>[A-Za-z0-9]+)-(?P<kind>trades|aggTrades|bookTicker|bookDepth|"
    r"\d+(?:s|m|h|d|w|mo))-(?P<date>\d{4}-\d{2}(?:-\d{2})?)\.csv$"
)


@dataclass(frozen=True)
class Layout:
    """One dump kind with a given field count: its columns and their canonical meaning."""

    dump: str
    kind: EventKind
    market: str
    columns: tuple[str, ...]
    mapping: dict[str, str]


_TRADE = {"ts_event": "time", "price": "price", "size": "qty", "side": "is_buyer_maker"}
_AGG = {"ts_event": "transact_time", "price": "price", "size": "quantity"}
_AGG |= {"side": "is_buyer_maker", "trade_id": "agg_trade_id"}
_KLINE = {c: c for c in ("open", "high", "low", "close", "volume")}
# vwap is quote volume / volume: the quote volume is read into vwap, then divided.
_KLINE |= {"ts_event": "open_time", "trade_count": "count", "vwap": "quote_volume"}
_TICKER = {"ts_event": "transaction_time", "sequence": "update_id"}
_TICKER |= {"bid_px": "best_bid_price", "bid_sz": "best_bid_qty"}
_TICKER |= {"ask_px": "best_ask_price", "ask_sz": "best_ask_qty"}
_KLINE_COLUMNS = (
    "open_time", "open", "high", "low", "close", "volume", "close_time", "quote_volume",
    "count", "taker_buy_volume", "taker_buy_quote_volume", "ignore",
)  # fmt: skip

LAYOUTS: tuple[Layout, ...] = (
    Layout(
        "trades", EventKind.TRADES, "spot",
        ("id", "price", "qty", "quote_qty", "time", "is_buyer_maker", "is_best_match"),
        _TRADE | {"trade_id": "id"},
    ),
    Layout(
        "trades", EventKind.TRADES, "futures",
        ("id", "price", "qty", "quote_qty", "time", "is_buyer_maker"),
        _TRADE | {"trade_id": "id"},
    ),
    Layout(
        "aggTrades", EventKind.TRADES, "spot",
        ("agg_trade_id", "price", "quantity", "first_trade_id", "last_trade_id",
         "transact_time", "is_buyer_maker", "is_best_match"),
        _AGG,
    ),
    Layout(
        "aggTrades", EventKind.TRADES, "futures",
        ("agg_trade_id", "price", "quantity", "first_trade_id", "last_trade_id",
         "transact_time", "is_buyer_maker"),
        _AGG,
    ),
    Layout("klines", EventKind.OHLCV, "spot or futures", _KLINE_COLUMNS, _KLINE),
    Layout(
        "bookDepth", EventKind.MBP10, "futures",
        ("timestamp", "percentage", "depth", "notional"), {"ts_event": "timestamp"},
    ),
    Layout(
        "bookTicker", EventKind.QUOTES, "futures",
        ("update_id", "best_bid_price", "best_bid_qty", "best_ask_price", "best_ask_qty",
         "transaction_time", "event_time"),
        _TICKER,
    ),
)  # fmt: skip

#: ``is_buyer_maker`` true: the seller was the aggressor.
_SIDES = {"true": -1, "True": -1, "TRUE": -1, "false": 1, "False": 1, "FALSE": 1}


def layout_of(name: str, first_line: str, delimiter: str = ",") -> tuple[Layout, bool]:
    """The layout of dump ``name`` whose first line is ``first_line`` (fields split on
    ``delimiter``: Binance writes commas), and whether that line is a header.

    Raises
    ------
    ConfigError
        For a name that is not a dump's, or a field count no layout of that kind has.
    """
    match = DUMP_NAME.match(name.rsplit("/", 1)[-1])
    if match is None:
        raise ConfigError(
            f"{name}: not a Binance dump name (SYMBOL-KIND-YYYY-MM[-DD].csv, e.g. "
            "BTCUSDT-trades-2024-08-08.csv) nor a websocket capture"
        )
    dump = match["kind"] if not match["kind"][0].isdigit() else "klines"
    fields = [f.strip() for f in first_line.strip().split(delimiter)]
    # Data lines start with an id or a time (digits); header lines with a column name.
    header = bool(fields) and not fields[0][:1].isdigit()
    candidates = [layout for layout in LAYOUTS if layout.dump == dump]
    for layout in candidates:
        if len(layout.columns) == len(fields):
            return layout, header
    counts = sorted({len(layout.columns) for layout in candidates})
    # The header is told from the line itself: only the delimiter can be wrong.
    hint = layout_hint(first_line, delimiter, header=False)
    raise ConfigError(
        f"{name}: a Binance {dump} dump has {' or '.join(map(str, counts))} fields per line, "
        f"this one {len(fields)} on {shell_quoted(delimiter)} "
        f"({first_line.strip()[:120]!r}){hint}"
    )


def read_dump(source: Input, options: ReadOptions) -> Iterator[EventBatch]:
    """Read a dump through the generic CSV reader with its layout as the mapping."""
    first = source.head(1 << 16).lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0]
    delimiter = options.csv.delimiter
    layout, header = layout_of(source.name, first.decode("utf-8", "replace"), delimiter)
    if options.kind is not None and options.kind is not layout.kind:
        raise ConfigError(
            f"{source.url}: requested kind {options.kind.value!r} but a Binance {layout.dump} "
            f"dump holds {layout.kind.value}"
        )
    names = [f.strip() for f in first.decode("utf-8", "replace").strip().split(delimiter)]
    position = {column: i for i, column in enumerate(layout.columns)}
    columns = {
        canonical: names[position[column]] if header else str(position[column])
        for canonical, column in layout.mapping.items()
    }
    match = DUMP_NAME.match(source.name.rsplit("/", 1)[-1])
    symbol = options.symbol or (match["symbol"].upper() if match else None)
    if layout.dump == "bookDepth":
        yield from read_book_depth(source, options, symbol or "", header)
        return
    fmt = replace(options.csv, header=header, columns=columns, side_map=_SIDES)
    read = replace(options, kind=layout.kind, symbol=symbol, csv=fmt)
    what = f"binance {layout.market} {layout.dump} dump ({len(layout.columns)} columns, " + (
        "with a header)" if header else "no header)"
    )
    for batch in CsvReader().read(source, read):
        table = _finish(batch.table, layout)
        inference = batch.inference
        if inference is not None:
            named = {
                k: layout.columns[int(v)] if v.isdigit() else v
                for k, v in inference.columns.items()
            }
            derived = ("vwap: quote_volume / volume",) if layout.kind is EventKind.OHLCV else ()
            unused = [c for c in layout.columns if c not in layout.mapping.values()]
            notes = [
                f"not stored (no {layout.kind.value} column takes them): {unused}"
                if n.startswith("not stored")
                else n
                for n in inference.notes
            ]
            inference = Inference(named, (what, *derived, *notes))
        yield replace(batch, table=table, inference=inference)


def _finish(table: pa.Table, layout: Layout) -> pa.Table:
    venue = "binance" if layout.market == "spot" else "binance-futures"
    if layout.market == "spot or futures":
        venue = "binance"
    index = table.schema.get_field_index("venue")
    table = table.set_column(
        index, table.schema.field(index), pa.repeat(pa.scalar(venue), table.num_rows)
    )
    if layout.kind is EventKind.OHLCV:
        volume = table.column("volume")
        vwap = pc.if_else(pc.greater(volume, 0), pc.divide(table.column("vwap"), volume), None)
        index = table.schema.get_field_index("vwap")
        table = table.set_column(index, table.schema.field(index), vwap)
    return table
