"""Merging a session's staged parts: the order of the rows, whatever shortcut finds it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.ingest._merge import _order, _take


@st.composite
def _pieces(
    draw: st.DrawFn,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A block's rows as a merge gathers them: the parts' rows, the parts in input order,
    ordered by symbol (stable, so in (file, row) order within a symbol); times in file
    order, or not."""
    symbols, ts, sources, rows = [], [], [], []
    next_row = {0: 0, 1: 0}
    in_time_order = draw(st.booleans())
    for _ in range(draw(st.integers(1, 4))):
        source = draw(st.integers(0, 1))
        n = draw(st.integers(0, 12))
        codes = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
        times = sorted(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)))
        if not in_time_order:
            times = draw(st.permutations(times))
        symbols += codes
        ts += times
        sources += [source] * n
        rows += list(range(next_row[source], next_row[source] + n))
        next_row[source] += n
    by_symbol = sorted(range(len(symbols)), key=symbols.__getitem__)  # stable
    return (
        np.array(symbols, np.uint32)[by_symbol],
        np.array(ts, np.int64)[by_symbol],
        np.array(sources, np.int32)[by_symbol],
        np.array(rows, np.int64)[by_symbol],
    )


@settings(max_examples=300, deadline=None)
@given(_pieces())
def test_order_sorts_by_symbol_time_file_and_row(
    pieces: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    symbols, ts, sources, rows = pieces
    expected = np.lexsort((rows, sources, ts, symbols))
    order = _order(symbols, ts, sources, rows)
    got = np.arange(symbols.size) if order is None else order
    np.testing.assert_array_equal(got, expected)


def test_rows_by_symbol_in_time_order_need_no_sort() -> None:
    # Two batches of one file, gathered by symbol: each symbol's rows in file order.
    symbols = np.array([0, 0, 0, 1, 1, 1], np.uint32)
    ts = np.array([1, 3, 5, 2, 4, 6], np.int64)
    sources = np.zeros(6, np.int32)
    rows = np.array([0, 2, 3, 1, 4, 5], np.int64)
    assert _order(symbols, ts, sources, rows) is None
    ts[1] = 6  # later than the next row of its symbol: a full sort
    np.testing.assert_array_equal(_order(symbols, ts, sources, rows), [0, 2, 1, 3, 4, 5])


@settings(max_examples=60, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 30), min_size=1, max_size=5),
    data=st.data(),
)
def test_a_take_from_the_parts_chunks_equals_arrows_take_of_them_joined(
    cuts: list[int], data: st.DataObject
) -> None:
    # Columns of every kind a staged part holds: fixed width (natively taken), with
    # nulls, text, dictionaries and booleans (taken by Arrow); each part its own chunk,
    # a slice starting two rows into its buffers.
    parts = []
    for n in cuts:
        i = np.arange(n + 2)
        parts.append(
            pa.table(
                {
                    "ts_event": pa.array(i * 10, pa.timestamp("ns", tz="UTC")),
                    "price": pa.array(i / 4, pa.float64()),
                    "side": pa.array(i % 3 - 1, pa.int8()),
                    "size": pa.array([None if k % 5 == 0 else float(k) for k in i], pa.float64()),
                    "venue": pa.array([f"X{k % 3}" for k in i], pa.string()),
                    "flag": pa.array(i % 2 == 0, pa.bool_()),
                    "kind": pa.array([f"k{k % 2}" for k in i], pa.string()).dictionary_encode(),
                }
            ).slice(2)
        )
    table = pa.concat_tables(parts)
    total = table.num_rows
    rows = np.array(
        data.draw(st.lists(st.integers(0, max(total - 1, 0)), max_size=60)) if total else [],
        dtype=np.intp,
    )
    taken = _take(table, rows)
    assert taken.schema == table.schema
    assert taken.equals(pc.take(table.combine_chunks(), pa.array(rows, pa.int64())))
