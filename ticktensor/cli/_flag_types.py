"""Types of command-line flag values, checked when the arguments are parsed.

A type raises ``argparse.ArgumentTypeError``, which argparse reports as a usage error
under the flag's name (``argument --workers: ...``), never the Python keyword behind it.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

__all__ = ["parse_period", "positive_int"]

_EXAMPLES = "e.g. 2024-01-02:2024-02-01 or 2024-01-02T14:30:2024-01-02T21:00"


def positive_int(text: str) -> int:
    """``text`` as an integer >= 1 (rows, workers ...).

    Examples
    --------
    >>> positive_int("8")
    8
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _instant_ns(text: str) -> int | None:
    """``text`` as ns since the epoch (a naive time is UTC), or None if it is not ISO 8601."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delta = when - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def parse_period(text: str) -> tuple[int, int]:
    """``[start, end)`` in ns UTC from ``START:END``, each a date or an ISO 8601 timestamp.

    Timestamps hold colons too, so the split is the one colon where both sides read as
    dates or timestamps. Times without a zone are UTC; ``Z`` or an offset is converted.
    Raises ``argparse.ArgumentTypeError`` (argparse reports it under the flag's name)
    for text that is no such period, or a period whose start is not before its end.

    Examples
    --------
    >>> parse_period("2024-01-02:2024-01-03")
    (1704153600000000000, 1704240000000000000)
    >>> parse_period("2024-01-02T14:30Z:2024-01-02T16:30+01:00")  # one hour
    (1704205800000000000, 1704209400000000000)
    """
    splits = []
    for i, char in enumerate(text):
        if char == ":":
            start, end = _instant_ns(text[:i]), _instant_ns(text[i + 1 :])
            if start is not None and end is not None:
                splits.append((text[:i], text[i + 1 :], start, end))
    if len(splits) != 1:
        why = "" if not splits else f", which splits into START:END {len(splits)} ways"
        raise argparse.ArgumentTypeError(
            f"expected START:END, each a date or an ISO timestamp (UTC unless it has a zone), "
            f"{_EXAMPLES}; got {text!r}{why}"
        )
    ((first, last, start, end),) = splits
    if start >= end:
        raise argparse.ArgumentTypeError(
            f"the period must start before it ends, got start {first} and end {last} "
            "(END is exclusive)"
        )
    return start, end
