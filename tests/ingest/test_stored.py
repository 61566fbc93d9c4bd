"""The (symbol, day) bookkeeping of partial merges against slow references in plain Python."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.ingest._stored import _common_days, carried_rows

DAY_NS = 86_400 * 10**9
INT64 = np.iinfo(np.int64)

#: Nanoseconds near each other (days apart), far apart (centuries), and at int64's ends.
times = st.one_of(
    st.integers(-40 * DAY_NS, 40 * DAY_NS),
    st.integers(int(INT64.min), int(INT64.max)),
    st.sampled_from([int(INT64.min), int(INT64.max), -1, 0, DAY_NS - 1, DAY_NS]),
)
symbols = st.sampled_from(["A", "B", "C|1", "C", "é"])


def _days(ts: list[int]) -> list[int]:
    return [t // DAY_NS for t in ts]


@settings(max_examples=300, deadline=None)
@given(st.lists(times, max_size=30), st.lists(times, max_size=30))
def test_common_days_are_the_days_both_sides_hold(a: list[int], b: list[int]) -> None:
    in_a, in_b = _common_days(np.array(a, np.int64), np.array(b, np.int64))
    both = set(_days(a)) & set(_days(b))
    assert in_a.tolist() == [d in both for d in _days(a)]
    assert in_b.tolist() == [d in both for d in _days(b)]


def _table(rows: list[tuple[str, int]], encoded: bool) -> pa.Table:
    column = pa.array([s for s, _ in rows], pa.string())
    return pa.table(
        {
            "symbol": column.dictionary_encode() if encoded else column,
            "ts_event": pa.array([t for _, t in rows], pa.int64()).cast(pa.timestamp("ns")),
            "row": pa.array(range(len(rows)), pa.int64()),
        }
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.tuples(symbols, times), max_size=8), min_size=1, max_size=3),
    st.lists(st.tuples(symbols, times), max_size=40),
    st.booleans(),
)
def test_carried_rows_are_the_jobs_symbols_on_days_it_lacks(
    parts: list[list[tuple[str, int]]], stored: list[tuple[str, int]], encoded: bool
) -> None:
    job = {(s, t // DAY_NS) for part in parts for s, t in part}
    mine = {s for s, _ in job}
    expected = [i for i, (s, t) in enumerate(stored) if s in mine and (s, t // DAY_NS) not in job]
    carried = carried_rows([_table(p, encoded) for p in parts], _table(stored, False))
    assert carried.column("row").to_pylist() == expected
