"""The (symbol, day) bookkeeping of partial merges against slow references in plain Python,
and its shortcut for feature rows that extend the stored ones against the day by day
comparison."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ticktensor.ingest import _stored
from ticktensor.ingest._stored import StoredFeatures, _common_days, carried_rows, merge_features
from ticktensor.store import PackData

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


def _pack(series: dict[str, list[tuple[int, float]]]) -> PackData:
    symbols = tuple(sorted(s for s in series if series[s]))
    rows = [r for s in symbols for r in series[s]]
    return PackData(
        symbols,
        np.cumsum([0, *(len(series[s]) for s in symbols)]).astype(np.int64),
        np.array([t for t, _ in rows], np.int64),
        np.array([[v, 1.0] for _, v in rows], np.float32).reshape(-1, 2),
        np.zeros((len(rows), 1), np.float32),
    )


#: A feature value: mostly one of a few, so that rows often agree; NaN too.
values = st.sampled_from([0.0, 1.0, float("nan")])


@st.composite
def _appended(draw: st.DrawFn) -> tuple[PackData, PackData]:
    """Stored feature rows of a few symbols, and a job's: per symbol the stored rows (or
    others), then rows on the stored days or later ones."""
    stored: dict[str, list[tuple[int, float]]] = {}
    job: dict[str, list[tuple[int, float]]] = {}
    for symbol in draw(st.sets(st.sampled_from(["A", "B", "C"]), min_size=1)):
        times = sorted(draw(st.sets(st.integers(0, 4 * DAY_NS // 3600), min_size=1, max_size=6)))
        held = [(t * 3600, draw(values)) for t in times]
        stored[symbol] = held
        if draw(st.booleans()):
            continue  # a symbol the job has no rows of
        prefix = held if draw(st.booleans()) else [(t, draw(values)) for t, _ in held]
        last = held[-1][0]
        later = sorted(draw(st.sets(st.integers(1, 2 * DAY_NS // 3600), max_size=3)))
        job[symbol] = prefix + [(last + t * 3600, draw(values)) for t in later]
    assume(any(job.values()))
    return _pack(job), _pack(stored)


@settings(max_examples=300, deadline=None)
@given(_appended())
def test_rows_extending_the_stored_ones_merge_as_the_days_compare_them(
    packs: tuple[PackData, PackData],
) -> None:
    job, held = packs
    names = (("f", "g"), ("label",))
    stored = StoredFeatures("all", held, *names, ())
    got = merge_features(job, names, stored, partial=True)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_stored, "_extends", lambda *arrays: False)  # every symbol by its days
        want = merge_features(job, names, stored, partial=True)
    assert (got.conflicts, got.kept, got.unchanged) == (want.conflicts, want.kept, want.unchanged)
    assert got.rows.symbols == want.rows.symbols
    for name in ("offsets", "ts", "values", "labels"):
        np.testing.assert_array_equal(getattr(got.rows, name), getattr(want.rows, name))
