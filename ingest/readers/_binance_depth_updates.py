"""Binance futures depth files: per-level snapshot and ``set`` update lines rebuilt into an
MBP-10 book with the websocket reader's sequence rules.

Binance's historical futures depth data comes as two CSV files per day and symbol,
``..._depth_snap.csv`` and ``..._depth_update.csv``, with the header
``symbol,timestamp,first_update_id,last_update_id,side,update_type,price,qty,pu``. Each
line is one price level (``side`` ``b``/``a``, absolute ``qty``; 0 removes the level);
the lines sharing ``update_type`` and ``last_update_id`` are one event:

- ``snap`` lines are a snapshot (``lastUpdateId`` = ``last_update_id``): the book is
  replaced and **one mbp10 row** (action ``R``) holds its top 10 levels;
- ``set`` lines are one diff (``U`` = ``first_update_id``, ``u`` = ``last_update_id``,
  ``pu``): applied as a whole by :class:`~._depth_book.DepthBook` with the futures rules
  (``pu`` chaining), **one mbp10 row** (action ``M``) with the top 10 after it, or one
  reject (``superseded``, ``stale``, ``sequence_gap``, ``no_snapshot``) naming the ids.

An update file seeds its book from the snapshots of its sibling snap file (the same name
with ``update`` -> ``snap``), read but not stored again: its rows belong to that file.
Rows are events, numbered by their first data line; a malformed line is a reject of its
own. Per-level work is Python (a dict per side), as in the websocket reader.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ConfigError
from ticktensor.ingest._sources import Input
from ticktensor.schemas import MBP_DEPTH, EventKind, cast_columns

from ._base import EventBatch, Inference, ReadOptions
from ._depth_book import LEVEL_COLUMNS, DepthBook
from ._text import Lines, parse_numbers, reject, rejects_table, split_lines
from ._time_inference import UNIT_NS, epoch_unit

__all__ = ["HEADER", "is_depth_updates", "read_depth_updates", "snapshot_sibling"]

#: The header of Binance's futures depth files.
HEADER: tuple[str, ...] = (
    "symbol", "timestamp", "first_update_id", "last_update_id", "side", "update_type",
    "price", "qty", "pu",
)  # fmt: skip
_NUMBERS = {
    "timestamp": pa.int64(),
    "first_update_id": pa.int64(),
    "last_update_id": pa.int64(),
    "price": pa.float64(),
    "qty": pa.float64(),
    "pu": pa.int64(),
}
_SIDES = {"b": "b", "bid": "b", "buy": "b", "a": "a", "ask": "a", "s": "a", "sell": "a"}
_UPDATE = re.compile(r"(depth[_\-.])update", re.IGNORECASE)


def is_depth_updates(head: bytes, delimiter: str = ",") -> bool:
    """Whether a file starting with ``head`` has the depth files' header."""
    first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].rstrip(b"\r")
    fields = [f.strip().lower() for f in first.decode("utf-8", "replace").split(delimiter)]
    return tuple(fields) == HEADER


def snapshot_sibling(name: str) -> str | None:
    """The snap file name of a depth update file name (``None``: not one).

    Examples
    --------
    >>> snapshot_sibling("BTCUSDT_T_DEPTH_2024-01-01_depth_update.csv")
    'BTCUSDT_T_DEPTH_2024-01-01_depth_snap.csv'
    >>> snapshot_sibling("btcusdt-depth-snap.csv") is None
    True
    """
    found = list(_UPDATE.finditer(name))
    if not found:
        return None
    last = found[-1]
    return name[: last.start()] + last.group(1) + "snap" + name[last.end() :]


@dataclass
class _Event:
    """One snapshot or diff: the lines sharing ``update_type`` and ``last_update_id``."""

    row: int
    ts: int
    symbol: str
    kind: str
    first: int
    last: int
    previous: int
    bids: list[tuple[float, float]] = field(default_factory=list)
    asks: list[tuple[float, float]] = field(default_factory=list)
    raw: str = ""


@dataclass
class _State:
    """One read: books per symbol, snapshots waiting to seed them, output rows."""

    url: str
    unit_ns: int | None = None
    books: dict[str, DepthBook] = field(default_factory=dict)
    seeds: dict[str, deque[_Event]] = field(default_factory=dict)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def read_depth_updates(source: Input, options: ReadOptions) -> Iterator[EventBatch]:
    """The events of a depth file as mbp10 rows and rejects, in batches."""
    if options.kind is not None and options.kind is not EventKind.MBP10:
        raise ConfigError(
            f"{source.url}: a Binance futures depth file holds order-book updates, read as "
            f"mbp10, not {options.kind.value}"
        )
    state = _State(source.url)
    sibling = _sibling(source)
    notes = [
        "binance futures depth file (symbol,timestamp,first_update_id,last_update_id,side,"
        "update_type,price,qty,pu): a snap event -> one mbp10 row (action R), a set "
        "update -> one mbp10 row (action M, the top 10 after it; pu chaining, gaps "
        "quarantined until the next snapshot); a row per event, numbered by its first line"
    ]
    if sibling is not None:
        for event in _events(sibling, options, _State(sibling.url)):
            if event.kind == "snap":
                state.seeds.setdefault(event.symbol, deque()).append(event)
        seeded = sum(len(s) for s in state.seeds.values())
        notes.append(f"book seeded by the {seeded} snapshot(s) of {sibling.name}")
    for event in _events(source, options, state):
        _apply(state, event)
        if len(state.numbers) + len(state.rejects) >= options.batch_rows:
            yield _flush(state, None)
    # The report's notes ride on the last batch, once the events are counted.
    yield _flush(state, Inference({}, (*notes, _counts(state))))


def _sibling(source: Input) -> Input | None:
    """The snap file beside the update file ``source`` (same compression), if any."""
    base = source.path.rsplit("/", 1)[-1]
    name = snapshot_sibling(base)
    if name is None:
        return None
    path = source.path[: len(source.path) - len(base)] + name
    if not source.fs.exists(path):
        return None
    url = source.url[: len(source.url) - len(base)] + name
    return Input(url=url, fs=source.fs, path=path, size=int(source.fs.size(path)))


def _counts(state: _State) -> str:
    counts = ", ".join(f"{k} {v:,}" for k, v in sorted(state.counts.items()))
    return f"events: {counts or 'none'}"


def _events(source: Input, options: ReadOptions, state: _State) -> Iterator[_Event]:
    """The file's events in order (consecutive lines of one symbol, update type and
    ``last_update_id``), its malformed lines as rejects. Lines are grouped with Arrow
    and numpy kernels; Python runs once per event, not per line."""
    delimiter = options.csv.delimiter
    pending: _Event | None = None
    with source.open() as stream:
        for lines in split_lines(
            stream, HEADER, options.batch_rows, source.url, skip=1, delimiter=delimiter
        ):
            parsed = parse_numbers(lines, _NUMBERS, source.url)
            state.rejects += parsed.rejects
            for event in _group(_checked(parsed, state), state):
                if pending is not None and _key(pending) == _key(event):
                    pending.bids += event.bids  # an event split across two blocks
                    pending.asks += event.asks
                    continue
                if pending is not None:
                    yield pending
                pending = event
    if pending is not None:
        yield pending


def _key(event: _Event) -> tuple[str, int, str]:
    return event.symbol, event.last, event.kind


_SIDE_NAMES = pa.array(list(_SIDES))
_BID_CODES = np.array([_SIDES[name] == "b" for name in _SIDES])
_KINDS = pa.array(["snap", "set"])


def _checked(lines: Lines, state: _State) -> Lines:
    """``lines`` without those whose side or update type is unknown (rejects)."""
    side = pc.index_in(pc.utf8_lower(pc.utf8_trim_whitespace(lines.columns["side"])), _SIDE_NAMES)
    kind = pc.index_in(pc.utf8_lower(pc.utf8_trim_whitespace(lines.columns["update_type"])), _KINDS)
    bad = np.asarray(pc.or_(pc.is_null(side), pc.is_null(kind)).to_numpy(zero_copy_only=False))
    lines.columns["side_code"] = side
    lines.columns["kind_code"] = kind
    if not bad.any():
        return lines
    side_bad = np.asarray(pc.is_null(side).to_numpy(zero_copy_only=False))
    for i in np.flatnonzero(bad).tolist():
        column = "side" if side_bad[i] else "update_type"
        why = "is not a side (b, a)" if side_bad[i] else "is not an update type (snap, set)"
        value = str(lines.columns[column][i].as_py())
        row = int(lines.rows[i])
        state.rejects.append(reject(state.url, row, column, value, str(lines.raw[i]), why))
    return lines.take(~bad)


def _numbers(lines: Lines, name: str) -> np.ndarray:
    return np.asarray(lines.columns[name].to_numpy(zero_copy_only=False))


def _group(lines: Lines, state: _State) -> Iterator[_Event]:
    """The events of one block of checked lines (the first may go on in the next block)."""
    n = len(lines.rows)
    if n == 0:
        return
    last = _numbers(lines, "last_update_id")
    kind = _numbers(lines, "kind_code")
    symbols = lines.columns["symbol"]
    starts = np.ones(n, dtype=bool)
    if n > 1:
        same_symbol = pc.equal(symbols.slice(1), symbols.slice(0, n - 1))
        same = (last[1:] == last[:-1]) & (kind[1:] == kind[:-1])
        same &= np.asarray(same_symbol.to_numpy(zero_copy_only=False), dtype=bool)
        starts[1:] = ~same
    begin = np.flatnonzero(starts)
    end = np.append(begin[1:], n)
    is_bid = _BID_CODES[_numbers(lines, "side_code")]
    price, qty = _numbers(lines, "price"), _numbers(lines, "qty")
    ts, first, previous = (_numbers(lines, c) for c in ("timestamp", "first_update_id", "pu"))
    # Python objects once per block: Arrow scalars cost microseconds each.
    at = pa.array(begin)
    names = [str(v).strip().upper() for v in symbols.take(at).to_pylist()]
    raws = [str(v) for v in lines.raw.take(at).to_pylist()]
    levels = list(zip(price.tolist(), qty.tolist(), strict=True))
    bid_list = is_bid.tolist()
    heads = zip(
        lines.rows[begin].tolist(),
        ts[begin].tolist(),
        kind[begin].tolist(),
        first[begin].tolist(),
        last[begin].tolist(),
        previous[begin].tolist(),
        strict=True,
    )
    for i, (row, time, code, first_id, last_id, pu) in enumerate(heads):
        b, e = int(begin[i]), int(end[i])
        bids = [levels[j] for j in range(b, e) if bid_list[j]]
        asks = [levels[j] for j in range(b, e) if not bid_list[j]]
        kind_name = "snap" if code == 0 else "set"
        yield _Event(
            row, _ns(state, time), names[i], kind_name, first_id, last_id, pu, bids, asks, raws[i]
        )


def _ns(state: _State, value: int) -> int:
    if state.unit_ns is None:  # decided once per file, from the first time
        state.unit_ns = UNIT_NS[epoch_unit(float(value))]
    return value * state.unit_ns


def _apply(state: _State, event: _Event) -> None:
    book = state.books.setdefault(event.symbol, DepthBook(futures=True))
    if event.kind == "snap":
        book.load(event.last, event.bids, event.asks)
        _row(state, event, "R", book)
        return
    seeds = state.seeds.get(event.symbol)
    # The first snapshot seeds an empty book (updates before it are superseded); a later
    # one once the updates reach it, where the book is broken or it is not older.
    while seeds and (book.snapshot_id is None or seeds[0].last <= event.last):
        seed = seeds.popleft()
        if book.snapshot_id is None or book.broken is not None or seed.last >= event.first:
            book.load(seed.last, seed.bids, seed.asks)
    refusal = book.apply(event.first, event.last, event.previous, event.bids, event.asks)
    if refusal is None:
        _row(state, event, "M", book)
        return
    ids = f"U={event.first} u={event.last} pu={event.previous}"
    reason = refusal.reason
    if refusal.rule == "no_snapshot":
        reason += " (no snap lines before it, nor a depth_snap file beside this one)"
    message = f"{state.url} row {event.row}: depth update {ids}: {reason} (rule: {refusal.rule})"
    state.rejects.append(
        {"row": event.row, "column": None, "value": None, "rule": refusal.rule}
        | {"message": message, "raw": event.raw}
    )
    state.counts[f"rejected {refusal.rule}"] = state.counts.get(f"rejected {refusal.rule}", 0) + 1


def _row(state: _State, event: _Event, action: str, book: DepthBook) -> None:
    bids, asks = book.top(MBP_DEPTH)
    cells: list[float | None] = []
    for side in (bids, asks):
        empty: list[float | None] = [None] * (MBP_DEPTH - len(side))
        cells += [px for px, _ in side] + empty + [sz for _, sz in side] + empty
    state.rows.append((event.ts, event.symbol, action, *cells, event.last))
    state.numbers.append(event.row)
    what = "snapshot" if action == "R" else "update"
    state.counts[what] = state.counts.get(what, 0) + 1


def _flush(state: _State, inference: Inference | None) -> EventBatch:
    names = ("ts_event", "symbol", "action", *LEVEL_COLUMNS, "sequence")
    columns = list(zip(*state.rows, strict=True)) if state.rows else [()] * len(names)
    arrays: dict[str, pa.Array] = {}
    for name, values in zip(names, columns, strict=True):
        type_ = (
            pa.int64()
            if name == "ts_event"
            else pa.string()
            if name in ("symbol", "action")
            else pa.uint64()
            if name == "sequence"
            else pa.float64()
        )
        arrays[name] = pa.array(list(values), type_)
    n = len(state.rows)
    arrays["venue"] = pa.array(["binance-futures"] * n, pa.string())
    arrays["side"] = pa.array(np.zeros(n, dtype=np.int8))
    table = cast_columns(pa.table(arrays), EventKind.MBP10)
    rejects = rejects_table(sorted(state.rejects, key=lambda r: int(r["row"])))
    rows = np.asarray(state.numbers, dtype=np.int64)
    state.rows, state.numbers, state.rejects = [], [], []
    return EventBatch(EventKind.MBP10, table, rows, rejects=rejects, inference=inference)
