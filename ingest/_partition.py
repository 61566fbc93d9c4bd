"""Partitions: the period of time a store keeps in one pack (a day, a month or a year).

A store keeps one pack (and one table per kind) per partition. Intraday data is
partitioned by session, a UTC day (``2024-03-05``); data with few rows per session
(daily bars, funding rates, end-of-day chains) by month (``2024-03``) or year (``2024``),
so that twenty years of daily bars are twenty packs, not five thousand. A partition is a
coarser session key: its label is the session name of every pack, table and report, and a
job merges its rows into a stored partition as it does into a stored day.

``auto`` picks the finest period in which a symbol typically has at least
:data:`MIN_PARTITION_ROWS` rows. The trade-off: a pack costs a fixed handful of objects
(its Zarr metadata, index, chunks, the events table) and a manifest entry whatever its
rows, while appending a day to a partition rewrites the partition. Below about 64 rows
per symbol the fixed cost dominates (one object per few rows); above it, a longer
partition would make each append rewrite more rows than it adds objects it saves. One-
minute bars (390 a session) are partitioned by day, hourly bars (about 7 a session, 150 a
month) by month, daily bars by year. A job of one day is partitioned by day: one day's
rows do not tell a tick file of a few rows from a day of daily bars.

The choice is recorded in the store (the version attribute ``partition``) by the first
ingest and reused by every later one: the sessions of a store are of one kind.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, cast, get_args

from ticktensor.errors import ConfigError

__all__ = [
    "MIN_PARTITION_ROWS",
    "Partition",
    "PartitionChoice",
    "check_choice",
    "choose_partition",
    "partition_label",
    "partition_of_label",
]

Partition = Literal["day", "month", "year"]
PartitionChoice = Literal["auto", "day", "month", "year"]

#: Rows per symbol a partition should typically hold; ``auto`` picks the finest period
#: that reaches it (see the module's docstring).
MIN_PARTITION_ROWS = 64

#: Sessions of a month and of a year assumed by ``auto`` when the job's own days do not
#: say (a job of a few days): a trading calendar's.
_SESSIONS = {"day": 1, "month": 21, "year": 252}
_LABEL_LENGTH = {"day": 10, "month": 7, "year": 4}


def partition_label(session: str, partition: Partition) -> str:
    """The label of the partition holding the UTC day ``session`` (``YYYY-MM-DD``)."""
    return session[: _LABEL_LENGTH[partition]]


def partition_of_label(label: str) -> Partition:
    """The kind of partition a label names, from its form (``2024``, ``2024-03``, ...)."""
    for partition, length in _LABEL_LENGTH.items():
        if len(label) == length:
            return cast(Partition, partition)
    raise ValueError(f"{label!r} is not a day, month or year label")


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
    # Typical rows of a symbol in a session: the median over the job's days.
    dense = sorted(rows / max(1, symbols) for rows, symbols in per_day.values())
    typical = dense[len(dense) // 2]
    finer: tuple[Partition, ...] = ("day", "month")
    for partition in finer:
        if typical * _SESSIONS[partition] >= MIN_PARTITION_ROWS:
            return partition
    return "year"
