"""Merging a session's staged parts: the order of the rows, whatever shortcut finds it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.ingest._merge import _order


@st.composite
def _pieces(
    draw: st.DrawFn,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Staged pieces as a merge concatenates them: each piece's rows ordered by symbol,
    in (file, row) order within a symbol, the pieces in input order; times in file order,
    or not."""
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
        file_rows = list(range(next_row[source], next_row[source] + n))
        next_row[source] += n
        by_symbol = sorted(range(n), key=codes.__getitem__)  # stable: file order kept
        symbols += [codes[i] for i in by_symbol]
        ts += [times[i] for i in by_symbol]
        sources += [source] * n
        rows += [file_rows[i] for i in by_symbol]
    return (
        np.array(symbols, np.uint32),
        np.array(ts, np.int64),
        np.array(sources, np.int32),
        np.array(rows, np.int64),
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


def test_pieces_in_time_order_need_a_sort_by_symbol_only() -> None:
    # Two batches of one file, each ordered by symbol: their rows interleave per symbol.
    symbols = np.array([0, 0, 1, 0, 1, 1], np.uint32)
    ts = np.array([1, 3, 2, 5, 4, 6], np.int64)
    sources = np.zeros(6, np.int32)
    rows = np.array([0, 2, 1, 3, 4, 5], np.int64)
    order = _order(symbols, ts, sources, rows)
    assert order is not None
    np.testing.assert_array_equal(order, [0, 1, 3, 2, 4, 5])
