"""Binance websocket captures: ``<receive ns> <JSON message>`` per line, as trades, quotes
and an MBP-10 book rebuilt from diff-depth streams.

Each non-blank line is one row or one reject: ``trade``/``aggTrade`` -> trades,
``bookTicker`` -> quotes, ``depthUpdate`` -> one mbp10 row with the top 10 levels after
the whole diff (action ``M``; a diff is one atomic update, so its levels are applied
together and no half-applied book is ever emitted), a REST depth snapshot
(``{"lastUpdateId", "bids", "asks"}``) -> one mbp10 row (action ``R``: the book is
replaced). Diffs the book cannot take follow :mod:`._depth_book`'s rules and become
rejects (``no_snapshot``, ``superseded``, ``stale``, ``sequence_gap``) naming the ids.
Messages are taken bare or wrapped in the combined-stream envelope
(``{"stream": ..., "data": ...}``); other streams are ``unsupported`` rejects.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
import pyarrow as pa

from ticktensor.ingest._sources import Input
from ticktensor.schemas import MBP_DEPTH, EventKind, cast_columns, schema_for

from ._base import REJECT_SCHEMA, EventBatch, Inference, ReadOptions
from ._depth_book import LEVEL_COLUMNS, DepthBook
from ._time_inference import UNIT_NS, epoch_unit

__all__ = ["MAX_WAITING", "CaptureDecoder"]

#: Diffs held per symbol while waiting for its first snapshot; older ones are rejected.
MAX_WAITING = 20_000
_NO_SNAPSHOT = "no depth snapshot for this diff: the book is unknown"

_COLUMNS: dict[EventKind, tuple[str, ...]] = {
    EventKind.TRADES: ("ts_event", "ts_recv", "symbol", "price", "size", "side", "trade_id"),
    EventKind.QUOTES: (
        "ts_event", "ts_recv", "symbol", "bid_px", "bid_sz", "ask_px", "ask_sz", "sequence",
    ),
    EventKind.MBP10: (
        "ts_event", "ts_recv", "symbol", "action", "side", *LEVEL_COLUMNS, "sequence",
    ),
}  # fmt: skip


class _LineRejectedError(Exception):
    """A line that becomes a reject: its rule and why."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason


class CaptureDecoder:
    """State of one capture read: per-kind rows, books per symbol, counts for the report."""

    def __init__(self, source: Input, options: ReadOptions) -> None:
        self.url = source.url
        self.options = options
        self.rows: dict[EventKind, list[tuple[Any, ...]]] = {k: [] for k in _COLUMNS}
        self.numbers: dict[EventKind, list[int]] = {k: [] for k in _COLUMNS}
        self.rejects: list[dict[str, Any]] = []
        self.books: dict[str, DepthBook] = {}
        self.pending: tuple[int, str, dict[str, Any]] | None = None  # snapshot without symbol
        self.last_depth_symbol = options.symbol
        self.unit_ns: int | None = None
        self.counts: Counter[str] = Counter()
        # Diffs that arrived before their symbol's first snapshot, as Binance's procedure
        # buffers them: (line, receive ns, message, raw line).
        self.waiting: dict[str, deque[tuple[int, int, dict[str, Any], bytes]]] = {}

    def decode(self, stream: IO[bytes]) -> Iterator[EventBatch]:
        """Every line of ``stream`` as rows of its kind or a reject, in batches."""
        for number, line in enumerate(stream, 1):
            text = line.rstrip(b"\r\n")
            if not text.strip():
                continue
            try:
                self._line(number, text)
            except _LineRejectedError as exc:
                self._reject(number, exc.rule, exc.reason, text)
            if any(len(r) >= self.options.batch_rows for r in self.numbers.values()):
                yield from self._flush()
        if self.pending is not None:
            number, raw, _ = self.pending
            why = "a depth snapshot with no depth stream to name its symbol; pass --symbol"
            self._reject(number, "no_symbol", why, raw.encode())
        for waiting in self.waiting.values():
            for number, _, _, raw_line in waiting:
                self._reject(number, "no_snapshot", _NO_SNAPSHOT, raw_line)
        yield from self._flush(final=True)

    def _line(self, number: int, text: bytes) -> None:
        head, _, body = text.partition(b" ")
        try:
            received = int(head)
            message = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise _LineRejectedError("unparseable", "not '<receive ns> <JSON message>'") from None
        stream = message.get("stream") if isinstance(message, dict) else None
        data = message.get("data") if stream is not None else message
        if not isinstance(data, dict):
            raise _LineRejectedError("unparseable", "the message is not a JSON object")
        event = data.get("e")
        try:
            if event in ("trade", "aggTrade"):
                self._trade(number, received, data, str(event))
            elif event == "depthUpdate":
                self._diff(number, received, data, text)
            elif "lastUpdateId" in data and "bids" in data:
                self._snapshot(number, received, data, text.decode("utf-8", "replace"))
            elif event == "bookTicker" or {"u", "b", "B", "a", "A"} <= data.keys():
                self._quote(number, received, data)
            else:
                name = stream or event or sorted(data)[:6]
                raise _LineRejectedError("unsupported", f"stream {name!r} has no canonical schema")
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            why = f"a field is missing or malformed ({type(exc).__name__}: {exc})"
            raise _LineRejectedError("unparseable", why) from None

    def _ns(self, value: Any) -> int:
        whole = int(value)  # raises before the unit is fixed from a malformed time
        if self.unit_ns is None:  # decided once per file, from the first exchange time
            self.unit_ns = UNIT_NS[epoch_unit(float(whole))]
        return whole * self.unit_ns

    def _wanted(self, kind: EventKind) -> bool:
        return self.options.kind is None or self.options.kind is kind

    def _add(self, kind: EventKind, number: int, values: tuple[Any, ...], what: str) -> None:
        self.rows[kind].append(values)
        self.numbers[kind].append(number)
        self.counts[what] += 1

    def _trade(self, number: int, received: int, data: dict[str, Any], event: str) -> None:
        if not self._wanted(EventKind.TRADES):
            return
        trade_id = data["t"] if event == "trade" else data["a"]
        values = (
            self._ns(data["T"]), received, str(data["s"]), float(data["p"]), float(data["q"]),
            -1 if data["m"] else 1, str(trade_id),
        )  # fmt: skip
        self._add(EventKind.TRADES, number, values, event)

    def _quote(self, number: int, received: int, data: dict[str, Any]) -> None:
        if not self._wanted(EventKind.QUOTES):
            return
        # Spot book tickers carry no exchange time: the receive time stands in.
        ts = self._ns(data["T"]) if "T" in data else received
        values = (
            ts, received, str(data["s"]), float(data["b"]), float(data["B"]),
            float(data["a"]), float(data["A"]), int(data["u"]),
        )  # fmt: skip
        self._add(EventKind.QUOTES, number, values, "bookTicker")

    def _book(self, symbol: str) -> DepthBook:
        return self.books.setdefault(symbol, DepthBook())

    def _snapshot(self, number: int, received: int, data: dict[str, Any], raw: str) -> None:
        if not self._wanted(EventKind.MBP10):
            return
        symbol = data.get("s") or data.get("symbol") or self.last_depth_symbol
        if symbol is None:  # named by the next diff
            if self.pending is not None:
                raise _LineRejectedError(
                    "no_symbol", "a second depth snapshot before any depth stream"
                )
            self.pending = (number, raw, dict(data, _received=received))
            return
        self._load(number, received, str(symbol), data)

    def _load(self, number: int, received: int, symbol: str, data: dict[str, Any]) -> None:
        book = self._book(symbol)
        last_id = int(data["lastUpdateId"])
        book.load(last_id, data["bids"], data["asks"])
        ts = self._ns(data["T"]) if "T" in data else received
        row = self._levels(ts, received, symbol, "R", book, last_id)
        self._add(EventKind.MBP10, number, row, "snapshot")
        for line, at, diff, raw in self.waiting.pop(symbol, ()):
            try:
                self._apply(line, at, diff)
            except _LineRejectedError as exc:
                self._reject(line, exc.rule, exc.reason, raw)

    def _diff(self, number: int, received: int, data: dict[str, Any], raw: bytes) -> None:
        if not self._wanted(EventKind.MBP10):
            return
        symbol = str(data["s"])
        self.last_depth_symbol = self.last_depth_symbol or symbol
        if self.pending is not None:
            first, _, snapshot = self.pending
            self.pending = None
            self.waiting.setdefault(symbol, deque()).append((number, received, data, raw))
            self._load(first, int(snapshot.pop("_received")), symbol, snapshot)
            return
        if self._book(symbol).snapshot_id is None:
            waiting = self.waiting.setdefault(symbol, deque())
            waiting.append((number, received, data, raw))
            if len(waiting) > MAX_WAITING:
                line, _, _, old = waiting.popleft()
                self._reject(line, "no_snapshot", _NO_SNAPSHOT, old)
            return
        self._apply(number, received, data)

    def _apply(self, number: int, received: int, data: dict[str, Any]) -> None:
        symbol = str(data["s"])
        book = self._book(symbol)
        book.futures = "pu" in data
        first_id, last_id = int(data["U"]), int(data["u"])
        previous = int(data["pu"]) if "pu" in data else None
        refusal = book.apply(first_id, last_id, previous, data["b"], data["a"])
        if refusal is not None:
            ids = f"U={first_id} u={last_id}" + (f" pu={previous}" if previous is not None else "")
            raise _LineRejectedError(refusal.rule, f"depth diff {ids}: {refusal.reason}")
        ts = self._ns(data["T"] if "T" in data else data["E"])
        row = self._levels(ts, received, symbol, "M", book, last_id)
        self._add(EventKind.MBP10, number, row, "depthUpdate")

    @staticmethod
    def _levels(
        ts: int, received: int, symbol: str, action: str, book: DepthBook, sequence: int | None
    ) -> tuple[Any, ...]:
        bids, asks = book.top(MBP_DEPTH)
        cells: list[float | None] = []
        for side in (bids, asks):
            empty: list[float | None] = [None] * (MBP_DEPTH - len(side))
            cells += [px for px, _ in side] + empty + [sz for _, sz in side] + empty
        return (ts, received, symbol, action, 0, *cells, sequence)

    def _reject(self, number: int, rule: str, reason: str, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace")
        message = f"{self.url} row {number}: {reason} (rule: {rule})"
        self.rejects.append(
            {"row": number, "column": None, "value": None, "rule": rule}
            | {"message": message, "raw": text}
        )
        self.counts[f"rejected {rule}"] += 1

    def _flush(self, final: bool = False) -> Iterator[EventBatch]:
        batches: list[EventBatch] = []
        for kind, rows in self.rows.items():
            if not rows:
                continue
            columns = list(zip(*rows, strict=True))
            table = pa.table(
                {
                    name: pa.array(values, _type(name))
                    for name, values in zip(_COLUMNS[kind], columns, strict=True)
                }
            )
            table = cast_columns(
                table.append_column("venue", pa.repeat(pa.scalar("binance"), len(rows))), kind
            )
            numbers = np.asarray(self.numbers[kind], dtype=np.int64)
            batches.append(EventBatch(kind, table, numbers))
            self.rows[kind], self.numbers[kind] = [], []
        if final and not batches:
            kind = self.options.kind or EventKind.TRADES
            batches.append(EventBatch(kind, _empty(kind), np.zeros(0, np.int64)))
        if batches and self.rejects:
            rejects = pa.Table.from_pylist(
                sorted(self.rejects, key=lambda r: r["row"]), schema=REJECT_SCHEMA
            )
            batches[0] = EventBatch(
                batches[0].kind, batches[0].table, batches[0].rows, rejects=rejects
            )
            self.rejects = []
        if final:
            last = batches[-1]
            batches[-1] = EventBatch(
                last.kind, last.table, last.rows, rejects=last.rejects, inference=self._inference()
            )
        yield from batches

    def _inference(self) -> Inference:
        counts = ", ".join(f"{what} {n:,}" for what, n in sorted(self.counts.items()))
        notes = [
            "binance websocket capture: trade/aggTrade -> trades, bookTicker -> quotes, "
            "depth snapshot + depthUpdate -> mbp10 (top 10 after each diff)",
            f"lines: {counts or 'none'}",
        ]
        if self.unit_ns is not None:
            unit = next(u for u, n in UNIT_NS.items() if n == self.unit_ns)
            notes.append(
                f"exchange times in {unit} (from the magnitude); ts_recv: the capture's ns"
            )
        if self.counts["bookTicker"]:
            notes.append("spot bookTicker has no exchange time: its ts_event is the receive time")
        return Inference({}, tuple(notes))


def _empty(kind: EventKind) -> pa.Table:
    schema = schema_for(kind)
    fields = [field.with_nullable(True) for field in schema]
    return pa.schema(fields, metadata=schema.metadata).empty_table()


def _type(name: str) -> pa.DataType:
    if name.startswith("ts_"):
        return pa.int64()
    if name in ("symbol", "action", "trade_id"):
        return pa.string()
    if name == "side":
        return pa.int8()
    if name == "sequence":
        return pa.uint64()
    return pa.float64()
