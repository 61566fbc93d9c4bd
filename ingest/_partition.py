"""Partitions: the period of time a store keeps in one pack (a day, a month, a year, or all).

A store keeps one pack (and one table per kind) per partition. Intraday data is
partitioned by session, a UTC day (``2024-03-05``); data with few rows per session
(daily bars, funding rates, end-of-day chains) by month (``2024-03``) or year (``2024``),
or, when it is small, as one partition for all time (``all``), so that twenty years of a
stock's daily bars are one pack, not five thousand. A partition is a coarser session key:
its label is the session name of every pack, table and report, and a job merges its rows
into a stored partition as it does into a stored day.

``auto`` picks the finest of day, month and year in which a symbol typically has at
least :data:`MIN_PARTITION_ROWS` rows. The trade-off: a pack costs a fixed handful of
objects (its Zarr metadata, index, chunks, the events table) and a manifest entry
whatever its rows, while appending a day to a partition rewrites the partition. Below
about 64 rows per symbol the fixed cost dominates (one object per few rows); above it, a
longer partition would make each append rewrite more rows than it adds objects it saves.
One-minute bars (390 a session) are partitioned by day, hourly bars (about 7 a session,
150 a month) by month, daily bars by year. Data coarser than a day whose year holds at
most :data:`MAX_WHOLE_YEAR_ROWS` rows of all its symbols together (daily bars of up to
64 symbols, hourly bars of up to 9) is instead one partition: its whole series
costs one pack, and an append rewrites a series that grows by at most that many rows a
year. A job of one day is partitioned by day: one day's rows do not tell a tick file of
a few rows from a day of daily bars.

The choice is recorded in the store (the version attribute ``partition``) by the first
ingest and reused by every later one: the sessions of a store are of one kind.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, cast, get_args

from ticktensor.errors import ConfigError

__all__ = [
    "MAX_WHOLE_YEAR_ROWS",
    "MIN_PARTITION_ROWS",
    "Partition",
    "PartitionChoice",
    "check_choice",
    "choose_partition",
    "partition_label",
    "partition_of_label",
]

Partition = Literal["day", "month", "year", "all"]
PartitionChoice = Literal["auto", "day", "month", "year", "all"]

#: Rows per symbol a partition should typically hold; ``auto`` picks the finest period
#: that reaches it (see the module's docstring).
MIN_PARTITION_ROWS = 64

#: Rows a year of the data may hold, all symbols together, for ``auto`` to keep data
#: coarser than a day as one partition (``all``): 64 rows a session of 252.
MAX_WHOLE_YEAR_ROWS = 64 * 252

#: The label of the one partition of a store partitioned ``all``.
WHOLE = "all"

#: Sessions of a month and of a year assumed by ``auto`` when the job's own days do not
#: say (a job of a few days): a trading calendar's.
_SESSIONS = {"month": 21, "year": 252}
_LABEL_LENGTH = {"day": 10, "month": 7, "year": 4}


def partition_label(session: str, partition: Partition) -> str:
    """The label of the partition holding the UTC day ``session`` (``YYYY-MM-DD``)."""
    if partition == "all":
        return WHOLE
    return session[: _LABEL_LENGTH[partition]]


def partition_of_label(label: str) -> Partition:
    """The kind of partition a label names, from its form (``2024``, ``2024-03``, ...)."""
    if label == WHOLE:
        return "all"
    for partition, length in _LABEL_LENGTH.items():
        if len(label) == length:
            return cast(Partition, partition)
    raise ValueError(f"{label!r} is not a day, month, year or {WHOLE!r} label")


def check_choice(value: str) -> PartitionChoice:
    """``value`` as a partition choice, or a :class:`ConfigError` naming the choices."""
    if value not in get_args(PartitionChoice):
        raise ConfigError(
            f"partition must be one of {list(get_args(PartitionChoice))}, got {value!r}"
        )
    return cast(PartitionChoice, value)


def choose_partition(
    choice: PartitionChoice,
    days: Iterable[tuple[str, int, int]],
    *,
    stored: str | None = None,
) -> Partition:
    """The partition of a job: the store's (``stored``), else ``choice``, else from ``days``.

    ``days`` are ``(session, rows, symbols)`` of the job's staged pieces: rows of a UTC
    day and (an upper bound of) the symbols among them. An explicit ``choice`` other than
    the store's recorded partition is a :class:`ConfigError`.
    """
    if stored is not None:
        if stored not in get_args(Partition):
            raise ConfigError(
                f"the store records partition {stored!r}, which is none of "
                f"{list(get_args(Partition))}: it was written by another program"
            )
        if choice not in ("auto", stored):
            raise ConfigError(
                f"the store's partition is {stored!r} (recorded by its first ingest), and "
                f"this job asks for partition {choice!r}: a store's sessions are of one "
                f"kind; ingest with --partition {stored} (or auto), or into a new store"
            )
        return cast(Partition, stored)
    if choice != "auto":
        return choice
    per_day: dict[str, tuple[int, int]] = {}
    for session, rows, symbols in days:
        total, most = per_day.get(session, (0, 0))
        per_day[session] = (total + rows, max(most, symbols))
    if len(per_day) < 2:
        return "day"  # one day says nothing of the data's frequency
    # Typical rows of a symbol, and of all symbols, in a session: medians over the days.
    dense = sorted(rows / max(1, symbols) for rows, symbols in per_day.values())
    typical = dense[len(dense) // 2]
    if typical >= MIN_PARTITION_ROWS:
        return "day"
    totals = sorted(rows for rows, _ in per_day.values())
    if totals[len(totals) // 2] * _SESSIONS["year"] <= MAX_WHOLE_YEAR_ROWS:
        return "all"  # small low-frequency data: its whole series is one pack
    return "month" if typical * _SESSIONS["month"] >= MIN_PARTITION_ROWS else "year"
