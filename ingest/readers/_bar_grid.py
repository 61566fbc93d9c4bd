"""Bar grid: the constant length of a file's bars, inferred from its timestamps, and the
bars that are off that grid.

Bars without an ``interval_ns`` column take their length from ``--interval``
(``ReadOptions.interval_ns``), else from the file name (``_1m``), else from the
timestamps of the file's first batch: the most common positive step between distinct
bar times (the smallest, on a tie), so gaps (weekends, halts, minutes without trades)
do not matter. The grid's phase is the most common ``ts_event % interval`` of that
batch (0 for bars on round minutes). A bar whose open time is off the grid (an
irregular bar: a 1-minute file's bar at 10:00:30) is quarantined with rule
``bar_grid``: its length would be a guess.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ticktensor.errors import SchemaError

from ._columns import Bad, ColumnPlan

__all__ = ["BarGrid", "infer_interval"]


def _mode(values: npt.NDArray[np.int64]) -> int:
    uniques, counts = np.unique(values, return_counts=True)
    return int(uniques[np.flatnonzero(counts == counts.max())[0]])


def infer_interval(ts: npt.NDArray[np.int64]) -> int | None:
    """The most common positive step between the distinct times ``ts`` (None: < 2 times).

    Examples
    --------
    >>> import numpy as np
    >>> minute = 60 * 10**9
    >>> infer_interval(np.array([0, minute, 2 * minute, 5 * minute, 6 * minute]))
    60000000000
    """
    steps = np.diff(np.unique(np.asarray(ts, dtype=np.int64))).astype(np.int64)
    return _mode(steps) if steps.size else None


def _describe(ns: int) -> str:
    for unit, size in (("d", 86_400 * 10**9), ("h", 3_600 * 10**9), ("min", 60 * 10**9)):
        if ns % size == 0:
            return f"{ns // size} {unit}"
    return f"{ns / 1e9:g} s"


class BarGrid:
    """The bar length and phase of one file, fixed by its first batch."""

    def __init__(self, plan: ColumnPlan, source: str) -> None:
        self.source = source
        given = plan.constants.get("interval_ns")
        self.interval: int | None = None if given is None else int(str(given))
        self.how = plan.interval_from
        self.phase: int | None = None
        self.note: str | None = None

    def apply(self, table: pa.Table, label: str) -> tuple[pa.Table, Bad | None]:
        """``table`` with ``interval_ns`` set, and its bars off the grid (column ``label``)."""
        column = table.column("ts_event").cast(pa.int64())
        # Integer ns throughout: float64 holds epoch ns only to 256 ns.
        known = np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool)
        times = np.asarray(pc.drop_null(column).to_numpy(zero_copy_only=False), dtype=np.int64)
        if self.interval is None:
            self.interval = infer_interval(times)
            if self.interval is None:
                raise SchemaError(
                    f"{self.source}: cannot infer the bar length from {len(times)} bar time(s) "
                    "and the file has no interval_ns column; pass --interval (e.g. 1m)"
                )
        if self.phase is None and times.size:
            self.phase = _mode(times % self.interval)
            self.note = (
                f"interval_ns: {self.interval} ns ({_describe(self.interval)}, {self.how}); "
                f"bars off the grid (open % interval != {self.phase}) quarantined as bar_grid"
            )
        interval = pa.repeat(pa.scalar(self.interval, pa.int64()), table.num_rows)
        index = table.schema.get_field_index("interval_ns")
        table = table.set_column(index, table.schema.field(index), interval)
        off = np.zeros(len(known), dtype=bool)
        if self.phase is not None:
            off[known] = times % self.interval != self.phase
        if not off.any():
            return table, None
        values = pc.cast(table.column("ts_event"), pa.string()).combine_chunks()
        reason = (
            f"is not on this file's bar grid ({_describe(self.interval)} bars opening at "
            f"multiples of the interval + {self.phase} ns)"
        )
        return table, Bad(label, off, values, reason, rule="bar_grid")
