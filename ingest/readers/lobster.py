"""LOBSTER message + orderbook file pairs (NASDAQ, academic) as MBO, trades, quotes or MBP-10."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ConfigError
from ticktensor.ingest._sources import Input
from ticktensor.ingest.readers._base import EventBatch, Reader, ReadOptions
from ticktensor.ingest.readers._text import (
    Lines,
    parse_numbers,
    reject,
    rejects_table,
    split_lines,
)
from ticktensor.schemas import MBP_DEPTH, EventKind, cast_columns

__all__ = ["LobsterReader"]

_NAME = re.compile(
    r"^(?P<ticker>.+)_(?P<date>\d{4}-\d{2}-\d{2})_(?P<start>\d+)_(?P<end>\d+)_"
    r"(?P<part>message|orderbook)_(?P<level>\d+)\.csv$"
)
_MESSAGE = ("time", "type", "order_id", "size", "price", "direction")
_TYPES = {"time": pa.float64(), "type": pa.int8(), "order_id": pa.int64(), "size": pa.int64()}
_TYPES |= {"price": pa.int64(), "direction": pa.int8()}
_DUMMY = 9999999999
_NEW_YORK = ZoneInfo("America/New_York")
#: LOBSTER event type -> canonical action (7, a trading halt, has none: "H" is quarantined).
_ACTIONS = np.array(["", "A", "C", "C", "F", "F", "T", "H"], dtype=object)


def _is_header(line: bytes, delimiter: str = ",") -> bool:
    first = line.split(delimiter.encode(), 1)[0].strip()
    return bool(first) and not re.fullmatch(rb"[-+]?[0-9.eE+-]+", first)


def _price(values: pa.Array) -> pa.Array:
    px = values.to_numpy(zero_copy_only=False).astype(np.int64)
    return pa.array(px / 10_000, mask=np.abs(px) == _DUMMY)


class LobsterReader(Reader):
    """LOBSTER ``TICKER_DATE_START_END_message_LEVEL.csv`` files, with their orderbook twin.

    ``kind`` mbo (default): every message (type 1 -> A, 2/3 -> C, 4/5 -> F, 6 -> T,
    7 halt -> "H", which the validator quarantines); side is the limit order's
    direction. trades: executions only (types 4, 5, 6), the aggressor on the opposite
    side of the executed order (0 for a cross). quotes and mbp10: one row per message
    with the book after it from the orderbook file, aligned row by row.
    """

    name = "lobster"

    @classmethod
    def sniff(cls, name: str, head: bytes) -> bool:
        """Whether the file name follows LOBSTER's naming pattern."""
        return _NAME.match(name.rsplit("/", 1)[-1]) is not None

    @classmethod
    def companion_of(cls, name: str) -> str | None:
        """The message file name of an orderbook file name (``None`` for anything else)."""
        base = name.rsplit("/", 1)[-1]
        match = _NAME.match(base)
        if match is None or match["part"] != "orderbook":
            return None
        folder = name[: len(name) - len(base)]
        return f"{folder}{base[: match.start('part')]}message_{match['level']}.csv"

    def read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        """Decode the message file ``source`` (and its orderbook file when needed)."""
        match = _NAME.match(source.name)
        if match is None or match["part"] != "message":
            raise ConfigError(
                f"{source.url}: not a LOBSTER message file name "
                "(expected TICKER_YYYY-MM-DD_START_END_message_LEVEL.csv)"
            )
        kind = options.kind or EventKind.MBO
        day = dt.date.fromisoformat(match["date"])
        noon = dt.datetime(day.year, day.month, day.day, 12, tzinfo=_NEW_YORK)
        offset = noon.utcoffset() or dt.timedelta(0)
        midnight_utc = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC) - offset
        base_ns = int(midnight_utc.timestamp()) * 10**9
        symbol = options.symbol or match["ticker"]
        book = self._book_input(source) if kind in (EventKind.QUOTES, EventKind.MBP10) else None
        levels = 0
        if book is not None:
            delimiter = options.csv.delimiter.encode()
            fields = book.head(65536).split(b"\n", 1)[0].count(delimiter) + 1
            levels = min(fields // 4, MBP_DEPTH if kind is EventKind.MBP10 else 1)
        with source.open() as stream:
            first = source.head(4096).split(b"\n", 1)[0]
            skip = int(_is_header(first, options.csv.delimiter))
            messages = split_lines(
                stream, _MESSAGE, options.batch_rows, source.url, skip, options.csv.delimiter
            )
            if book is None:
                for lines in messages:
                    parsed = parse_numbers(lines, _TYPES, source.url)
                    yield self._batch(parsed, kind, base_ns, symbol, None, levels)
                return
            yield from self._with_book(
                messages, source.url, book, kind, base_ns, symbol, levels, options
            )

    @staticmethod
    def _book_input(source: Input) -> Input:
        path = source.path.replace("_message_", "_orderbook_")
        if not source.fs.exists(path):
            raise ConfigError(
                f"{source.url}: quotes and mbp10 need the LOBSTER orderbook file {path}, "
                "which does not exist"
            )
        url = source.url.replace("_message_", "_orderbook_")
        return Input(url=url, fs=source.fs, path=path, size=int(source.fs.size(path)))

    def _with_book(
        self,
        messages: Iterator[Lines],
        url: str,
        book: Input,
        kind: EventKind,
        base_ns: int,
        symbol: str,
        levels: int,
        options: ReadOptions,
    ) -> Iterator[EventBatch]:
        delimiter = options.csv.delimiter
        width = book.head(65536).split(b"\n", 1)[0].count(delimiter.encode()) + 1
        names = tuple(f"c{i}" for i in range(width))
        with book.open() as stream:
            skip = int(_is_header(book.head(4096).split(b"\n", 1)[0], delimiter))
            books = split_lines(
                stream, names, options.batch_rows, book.url, skip, options.csv.delimiter
            )
            held: list[Lines] = []
            for lines in messages:
                msg = parse_numbers(lines, _TYPES, url)
                last = int(msg.rows[-1]) if len(msg.rows) else 0
                while not held or int(held[-1].rows[-1] if len(held[-1].rows) else 0) < last:
                    nxt = next(books, None)
                    if nxt is None:
                        break
                    held.append(parse_numbers(nxt, dict.fromkeys(names, pa.int64()), book.url))
                pool = _concat(held, names)
                found = np.isin(msg.rows, pool.rows)
                for i in np.flatnonzero(~found):
                    why = f"has no matching row in {book.url}"
                    row = int(msg.rows[i])
                    msg.rejects.append(reject(url, row, None, "", str(msg.raw[i]), why))
                msg = msg.take(found)
                aligned = pool.take(np.isin(pool.rows, msg.rows))
                msg.rejects.extend(pool.rejects)
                held = [pool.take(pool.rows > last)]
                held[0].rejects = []
                yield self._batch(msg, kind, base_ns, symbol, aligned, levels)

    def _batch(
        self,
        msg: Lines,
        kind: EventKind,
        base_ns: int,
        symbol: str,
        book: Lines | None,
        levels: int,
    ) -> EventBatch:
        c = msg.columns
        n = len(msg.rows)
        seconds = c["time"].to_numpy(zero_copy_only=False)
        ts = pa.array(base_ns + np.round(seconds * 1e9).astype(np.int64)).cast(
            pa.timestamp("ns", "UTC")
        )
        etype = c["type"].to_numpy(zero_copy_only=False).astype(np.int64)
        direction = c["direction"].to_numpy(zero_copy_only=False).astype(np.int8)
        cols: dict[str, Any] = {"ts_event": ts, "symbol": pa.array([symbol] * n, pa.string())}
        cols["venue"] = pa.array(["XNAS"] * n, pa.string())
        halt = etype == 7
        price = _price(c["price"]).to_numpy(zero_copy_only=False)
        cols["price"] = pa.array(price, mask=halt | np.isnan(price))
        cols["size"] = c["size"].cast(pa.float64())
        cols["side"] = np.where(halt | (etype == 6), 0, direction).astype(np.int8)
        actions = _ACTIONS[np.clip(etype, 0, 7)]
        actions[(etype < 1) | (etype > 7)] = None  # unknown types: a null action, quarantined
        cols["action"] = pa.array(actions, pa.string())
        rows, raw = msg.rows, msg.raw
        if kind is EventKind.MBO:
            ids = c["order_id"].to_numpy(zero_copy_only=False)
            # negative ids (crosses) have no order: a null the validator quarantines
            cols["order_id"] = pa.array(ids.astype(np.uint64), mask=ids < 0)
        elif kind is EventKind.TRADES:
            trade = np.isin(etype, (4, 5, 6))
            cols["side"] = np.where(etype == 6, 0, -direction).astype(np.int8)
            mask = pa.array(trade)
            cols = {k: pa.array(v).filter(mask) for k, v in cols.items()}
            rows, raw = rows[trade], raw.filter(mask)
        elif book is not None:
            b = book.columns
            for level in range(levels):
                ask_px, ask_sz = b[f"c{4 * level}"], b[f"c{4 * level + 1}"]
                bid_px, bid_sz = b[f"c{4 * level + 2}"], b[f"c{4 * level + 3}"]
                for side, px, sz in (("ask", ask_px, ask_sz), ("bid", bid_px, bid_sz)):
                    suffix = "" if kind is EventKind.QUOTES else f"_{level:02d}"
                    prices = _price(px)
                    cols[f"{side}_px{suffix}"] = prices
                    sizes = sz.cast(pa.float64())
                    cols[f"{side}_sz{suffix}"] = pc.if_else(prices.is_null(), None, sizes)
        table = cast_columns(pa.table(cols), kind)
        return EventBatch(kind, table, rows, raw, rejects_table(msg.rejects))


def _concat(parts: list[Lines], names: tuple[str, ...]) -> Lines:
    if not parts:
        empty = pa.array([], pa.string())
        return Lines(dict.fromkeys(names, empty), np.empty(0, np.int64), empty)
    columns = {k: pa.concat_arrays([p.columns[k] for p in parts]) for k in names}
    rows = np.concatenate([p.rows for p in parts])
    raw = pa.concat_arrays([p.raw for p in parts])
    return Lines(columns, rows, raw, [r for p in parts for r in p.rejects])
