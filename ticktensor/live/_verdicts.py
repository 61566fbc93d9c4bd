"""What the engine did with an event: a row, a joined update, or a refusal by ingest's rules."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["REFUSALS", "Verdict"]


class Verdict(IntEnum):
    """An event's fate; the numbers are the native core's.

    Refusals follow ingest's quarantine rules (``ticktensor.schemas.RULES``), plus
    ``LATE``: ingest sorts a session before computing features, while a live row once
    emitted cannot take an event stamped before it; and ``OTHER_KIND``: an event of a kind
    the clock does not read (quotes on the mbp10 clock, say), which changes nothing.
    """

    ROW = 0
    JOINED = 1
    LATE = 2
    DUPLICATE = 3
    NOT_NULL = 4
    FINITE = 5
    POSITIVE_PRICE = 6
    NON_NEGATIVE_SIZE = 7
    SIDE_DOMAIN = 8
    CROSSED_BOOK = 9
    UNKNOWN_SYMBOL = 10
    POSITIVE_TRADE_SIZE = 11
    OHLC_RANGE = 12
    ACTION_DOMAIN = 13
    LEVEL_ORDER = 14
    OTHER_KIND = 15


REFUSALS: tuple[Verdict, ...] = tuple(v for v in Verdict if v > Verdict.JOINED)
"""The verdicts that refuse an event (it changes no state)."""
