"""Diff-depth book: one symbol's price-level book rebuilt from a snapshot and Binance diff
events, following the exchange's sequence rules, so that a gap is never papered over.

A snapshot (``lastUpdateId`` ``L`` and the levels) replaces the book. Then, as Binance
documents for a local order book:

- a diff with final id ``u <= L`` is already in the snapshot: rejected as ``superseded``;
- the first diff applied must straddle the snapshot: ``U <= L + 1 <= u`` (spot), or
  ``U <= L <= u`` (futures, whose diffs carry ``pu``, the previous diff's ``u``);
- each later diff must follow the previous one: ``U == u_prev + 1`` (spot) or
  ``pu == u_prev`` (futures). A diff with ``u <= u_prev`` is a repeat (``stale``);
  anything else is a ``sequence_gap``: the book is unknown from there until the next
  snapshot, and every diff in between is rejected with the same rule and the gap's ids;
- before any snapshot the book is unknown: diffs are rejected as ``no_snapshot``.

Levels are absolute quantities: a quantity of 0 removes the level. A diff or snapshot
with a malformed level raises before the book changes.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from ticktensor.schemas import MBP_DEPTH

__all__ = ["LEVEL_COLUMNS", "DepthBook", "Refusal"]

#: The mbp10 level columns a book fills, in the canonical order.
LEVEL_COLUMNS = tuple(
    f"{side}_{what}_{level:02d}"
    for side in ("bid", "ask")
    for what in ("px", "sz")
    for level in range(MBP_DEPTH)
)

#: ``[price, quantity]`` pairs: text (Binance's JSON) or numbers (parsed CSV columns).
Levels = Iterable[tuple[str | float, str | float]]


@dataclass(frozen=True)
class Refusal:
    """Why a diff was not applied: a rule name and the ids that broke it."""

    rule: str
    reason: str


class DepthBook:
    """One symbol's book; ``futures`` selects the ``pu`` chaining rule."""

    def __init__(self, futures: bool = False) -> None:
        self.futures = futures
        self.bids: dict[float, float] = {}
        self.asks: dict[float, float] = {}
        self.snapshot_id: int | None = None  # L of the snapshot the book grew from
        self.last_id: int | None = None  # u of the last diff applied (None: none yet)
        self.broken: str | None = None  # the gap that made the book unknown

    def load(self, last_update_id: int, bids: Levels, asks: Levels) -> None:
        """Replace the book with a snapshot."""
        parsed_bids, parsed_asks = _parse(bids), _parse(asks)  # both, before any change
        self.bids = {price: size for price, size in parsed_bids if size != 0.0}
        self.asks = {price: size for price, size in parsed_asks if size != 0.0}
        self.snapshot_id = last_update_id
        self.last_id = None
        self.broken = None

    def apply(
        self, first: int, last: int, previous: int | None, bids: Levels, asks: Levels
    ) -> Refusal | None:
        """Apply the diff ``U=first``, ``u=last`` (``pu=previous``), or say why not."""
        if self.snapshot_id is None:
            return Refusal("no_snapshot", "no depth snapshot before this diff: the book is unknown")
        if self.broken is not None:
            return Refusal("sequence_gap", f"the book is unknown since {self.broken}")
        parsed_bids, parsed_asks = _parse(bids), _parse(asks)  # a bad level changes nothing
        refusal = self._check(self.snapshot_id, first, last, previous)
        if refusal is not None:
            return refusal
        _update(self.bids, parsed_bids)
        _update(self.asks, parsed_asks)
        self.last_id = last
        return None

    def _check(self, snapshot: int, first: int, last: int, previous: int | None) -> Refusal | None:
        if self.last_id is None:
            if last <= snapshot:
                why = f"u={last} <= the snapshot's lastUpdateId {snapshot}: already in it"
                return Refusal("superseded", why)
            start = snapshot if self.futures else snapshot + 1
            if first <= start <= last:
                return None
            self.broken = (
                f"the first diff after the snapshot (lastUpdateId {snapshot}) starts at "
                f"U={first}, past {start}"
            )
            return Refusal("sequence_gap", self.broken)
        if last <= self.last_id:
            return Refusal("stale", f"u={last} <= {self.last_id}, the last diff applied")
        if self.futures:
            if previous == self.last_id:
                return None
            self.broken = f"a gap: pu={previous} where the last diff applied had u={self.last_id}"
        else:
            if first == self.last_id + 1:
                return None
            self.broken = f"a gap: U={first} where {self.last_id + 1} was next"
        return Refusal("sequence_gap", self.broken)

    def top(self, depth: int) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
        """The best ``depth`` bid and ask levels, best first."""
        return _best(self.bids, depth, True), _best(self.asks, depth, False)


def _parse(levels: Levels) -> list[tuple[float, float]]:
    """``[price, quantity]`` pairs as floats (ValueError/TypeError on a bad one)."""
    return [(float(price), float(size)) for price, size in levels]


def _update(book: dict[float, float], levels: list[tuple[float, float]]) -> None:
    for price, size in levels:
        if size == 0.0:
            book.pop(price, None)
        else:
            book[price] = size


#: Levels up to which one sort (in C) beats a heap selection (Python steps per level).
_SORT_BELOW = 256


def _best(side: dict[float, float], depth: int, highest: bool) -> list[tuple[float, float]]:
    if len(side) <= _SORT_BELOW:
        return sorted(side.items(), reverse=highest)[:depth]
    pick = heapq.nlargest if highest else heapq.nsmallest
    return pick(depth, side.items())
