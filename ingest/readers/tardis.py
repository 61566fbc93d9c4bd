"""tardis.dev CSV datasets (trades, quotes, book snapshots, incremental L2) as canonical events."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import ConfigError
from ticktensor.ingest._sources import Input
from ticktensor.ingest.readers._base import EventBatch, Reader, ReadOptions
from ticktensor.ingest.readers._layout_hints import layout_hint
from ticktensor.ingest.readers._text import Lines, parse_numbers, rejects_table, split_lines
from ticktensor.schemas import MBP_DEPTH, EventKind, cast_columns

__all__ = ["TardisReader"]

_COMMON = ("exchange", "symbol", "timestamp", "local_timestamp")
_DATASETS: dict[str, tuple[frozenset[str], tuple[EventKind, ...]]] = {
    "trades": (frozenset({"id", "side", "price", "amount"}), (EventKind.TRADES,)),
    "quotes": (
        frozenset({"ask_amount", "ask_price", "bid_price", "bid_amount"}),
        (EventKind.QUOTES,),
    ),
    "incremental_book_L2": (
        frozenset({"is_snapshot", "side", "price", "amount"}),
        (EventKind.MBP10, EventKind.QUOTES),
    ),
    "book_snapshot": (frozenset({"asks[0].price"}), (EventKind.MBP10, EventKind.QUOTES)),
}
_SIDES = {"buy": 1, "bid": 1, "sell": -1, "ask": -1}


def _dataset(header: list[str]) -> str | None:
    if tuple(header[:4]) != _COMMON:
        return None
    rest = set(header[4:])
    for name, (columns, _) in _DATASETS.items():
        if columns <= rest and (name != "trades" or rest == columns):
            return name
    return None


def _side(values: pa.Array) -> npt.NDArray[np.int8]:
    text = pc.utf8_lower(values).to_numpy(zero_copy_only=False)
    out = np.zeros(len(text), dtype=np.int8)
    for word, side in _SIDES.items():
        out[text == word] = side
    return out


def _ts(values: pa.Array) -> pa.Array:
    """µs since the epoch -> timestamp[ns, UTC] (nulls kept)."""
    return pc.multiply(values, 1000).cast(pa.timestamp("ns", "UTC"))


class _Book:
    """One symbol's price-level book: price -> amount per side, prices kept sorted."""

    def __init__(self) -> None:
        self.levels: dict[int, dict[float, float]] = {1: {}, -1: {}}
        self.prices: dict[int, list[float]] = {1: [], -1: []}

    def update(self, side: int, price: float, amount: float) -> str:
        """Apply one level update; return the action (A new, M changed, C removed)."""
        levels, prices = self.levels[side], self.prices[side]
        if amount == 0:
            if levels.pop(price, None) is not None:
                del prices[bisect.bisect_left(prices, price)]
            return "C"
        action = "M" if price in levels else "A"
        if action == "A":
            bisect.insort(prices, price)
        levels[price] = amount
        return action

    def top(self, side: int, depth: int) -> list[tuple[float, float]]:
        prices = self.prices[side]
        best = prices[::-1][:depth] if side == 1 else prices[:depth]
        return [(p, self.levels[side][p]) for p in best]


class TardisReader(Reader):
    """tardis.dev downloadable CSV datasets (µs timestamps), detected by their header.

    ``trades`` -> trades; ``quotes`` -> quotes; ``book_snapshot_N`` -> mbp10 (the first
    10 levels; action "R": the book is replaced) or quotes (level 0);
    ``incremental_book_L2`` -> the price-level book rebuilt per symbol, one mbp10 (or
    quotes) row per update with the book after it: action A (new level), M (changed),
    C (amount 0 removes it); a snapshot after updates starts a new book. ``timestamp``
    is ``ts_event``, ``local_timestamp`` is ``ts_recv``, the exchange is the venue.
    """

    name = "tardis"

    @classmethod
    def sniff(cls, name: str, head: bytes) -> bool:
        """Whether the header is one of the tardis.dev datasets."""
        first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].decode("utf-8", "replace")
        return _dataset(first.strip().split(",")) is not None

    def read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        """Decode ``source`` in batches of about ``options.batch_rows`` rows."""
        first = source.head(1 << 16).lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0]
        header = first.decode("utf-8", "replace").strip().split(",")
        dataset = _dataset(header)
        if dataset is None:
            known = ", ".join(_DATASETS)
            hint = layout_hint(first.decode("utf-8", "replace"), ",", header=False)
            raise ConfigError(
                f"{source.url}: unknown tardis.dev CSV header {','.join(header)[:200]!r}"
                f"{hint}; supported datasets: {known} (columns {','.join(_COMMON)},...; "
                "tardis.dev writes commas)"
            )
        kinds = _DATASETS[dataset][1]
        kind = options.kind or kinds[0]
        if kind not in kinds:
            raise ConfigError(
                f"{source.url}: requested kind {kind.value!r} but tardis dataset {dataset!r} "
                f"maps to {', '.join(k.value for k in kinds)}"
            )
        unpaired = [
            c
            for c in header
            if c.endswith("].price") and c[: -len("price")] + "amount" not in header
        ]
        if unpaired:
            raise ConfigError(
                f"{source.url}: tardis header has {unpaired[0]} without its amount column"
            )
        numbers: dict[str, pa.DataType] = {"timestamp": pa.int64(), "local_timestamp": pa.int64()}
        numbers |= {c: pa.float64() for c in header if c.endswith(("price", "amount"))}
        books: dict[str, _Book] = {}
        loading: dict[str, bool] = {}  # symbol -> inside a snapshot
        with source.open() as stream:
            names = tuple(header)
            for lines in split_lines(stream, names, options.batch_rows, source.url, skip=1):
                parsed = parse_numbers(lines, numbers, source.url, empty_null=True)
                cols = self._columns(parsed, dataset, kind, books, loading)
                table = cast_columns(pa.table(cols), kind)
                rejects = rejects_table(parsed.rejects)
                yield EventBatch(kind, table, parsed.rows, parsed.raw, rejects)

    def _columns(
        self,
        lines: Lines,
        dataset: str,
        kind: EventKind,
        books: dict[str, _Book],
        loading: dict[str, bool],
    ) -> dict[str, Any]:
        c = lines.columns
        cols: dict[str, Any] = {
            "ts_event": _ts(c["timestamp"]),
            "ts_recv": _ts(c["local_timestamp"]),
        }
        cols |= {"symbol": c["symbol"], "venue": c["exchange"]}
        if dataset == "trades":
            cols |= {"price": c["price"], "size": c["amount"], "side": _side(c["side"])}
            return cols | {"trade_id": pc.if_else(pc.equal(c["id"], ""), None, c["id"])}
        if dataset == "quotes":
            for side in ("bid", "ask"):
                cols |= {f"{side}_px": c[f"{side}_price"], f"{side}_sz": c[f"{side}_amount"]}
            return cols
        if dataset == "book_snapshot":
            n = len(lines.rows)
            cols |= {"action": pa.array(["R"] * n), "side": np.zeros(n, dtype=np.int8)}
            for i in range(MBP_DEPTH if kind is EventKind.MBP10 else 1):
                for side in ("bid", "ask"):
                    if f"{side}s[{i}].price" in c:
                        suffix = "" if kind is EventKind.QUOTES else f"_{i:02d}"
                        cols[f"{side}_px{suffix}"] = c[f"{side}s[{i}].price"]
                        cols[f"{side}_sz{suffix}"] = c[f"{side}s[{i}].amount"]
            return cols
        return cols | self._rebuild(lines, kind, books, loading)

    @staticmethod
    def _rebuild(
        lines: Lines, kind: EventKind, books: dict[str, _Book], loading: dict[str, bool]
    ) -> dict[str, Any]:
        """Apply each L2 update to its symbol's book; the top levels after each update."""
        c = lines.columns
        n, depth = len(lines.rows), MBP_DEPTH if kind is EventKind.MBP10 else 1
        grid = {name: np.full((n, depth), np.nan) for name in ("bid_px", "bid_sz", "ask_px")}
        grid["ask_sz"] = np.full((n, depth), np.nan)
        actions: list[str] = []
        sides = _side(c["side"])
        snapshot = pc.equal(pc.utf8_lower(c["is_snapshot"]), "true").to_numpy(zero_copy_only=False)
        symbols = c["symbol"].to_pylist()
        prices = c["price"].fill_null(np.nan).to_numpy(zero_copy_only=False)
        amounts = c["amount"].fill_null(np.nan).to_numpy(zero_copy_only=False)
        for i in range(n):
            symbol = symbols[i]
            if snapshot[i] and not loading.get(symbol, False):
                books[symbol] = _Book()  # a snapshot after updates starts a new book
            loading[symbol] = bool(snapshot[i])
            book = books.setdefault(symbol, _Book())
            side, price, amount = int(sides[i]), float(prices[i]), float(amounts[i])
            if side == 0 or np.isnan(price) or np.isnan(amount):
                actions.append("")  # undecodable update: the validator flags the action
            else:
                actions.append(book.update(side, price, amount))
            for book_side, word in ((1, "bid"), (-1, "ask")):
                for level, (px, sz) in enumerate(book.top(book_side, depth)):
                    grid[f"{word}_px"][i, level] = px
                    grid[f"{word}_sz"][i, level] = sz
        cols: dict[str, Any] = {"action": pa.array(actions), "side": sides}
        cols |= {"price": c["price"], "size": c["amount"]}
        for name, values in grid.items():
            for level in range(depth):
                column = values[:, level]
                key = name if kind is EventKind.QUOTES else f"{name}_{level:02d}"
                cols[key] = pa.array(column, mask=np.isnan(column))
        return cols
