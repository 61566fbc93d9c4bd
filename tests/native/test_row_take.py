"""The native row take: rows of chunks' concatenation, checked against numpy's take of the
chunks joined (the slow, obviously correct reference)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.kernels import take_rows

DTYPES = [np.int8, np.uint16, np.float32, np.int64, np.float64, np.dtype("M8[ns]")]


@settings(max_examples=80, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    lengths=st.lists(st.integers(0, 50), min_size=1, max_size=8),
    data=st.data(),
)
def test_matches_a_take_of_the_joined_chunks(
    dtype: np.dtype[np.generic], lengths: list[int], data: st.DataObject
) -> None:
    total = sum(lengths)
    joined = np.arange(total, dtype=np.int64).astype(dtype)
    cuts = np.cumsum([0, *lengths])
    chunks = [joined[lo:hi] for lo, hi in itertools.pairwise(cuts)]
    rows = np.array(
        data.draw(st.lists(st.integers(0, total - 1), max_size=200)) if total else [],
        dtype=np.int64,
    )
    out = take_rows(chunks, rows, dtype)
    assert out.dtype == np.dtype(dtype)
    assert np.array_equal(out, joined[rows])


def test_rows_running_backwards_and_across_chunks() -> None:
    chunks = [np.arange(0, 5), np.arange(5, 6), np.arange(6, 20)]
    rows = np.array([19, 0, 5, 4, 6, 5, 19, 3], dtype=np.int64)
    assert take_rows(chunks, rows, np.int64).tolist() == rows.tolist()


def test_chunk_views_with_offsets_are_read_from_their_start() -> None:
    base = np.arange(100, dtype=np.float64)
    chunks = [base[10:20], base[50:55]]
    assert take_rows(chunks, np.array([0, 9, 10, 14]), np.float64).tolist() == [10, 19, 50, 54]


@pytest.mark.parametrize("row", [-1, 7])
def test_a_row_outside_the_chunks_raises_index_error(row: int) -> None:
    with pytest.raises(IndexError, match=f"row {row} at position 1 is outside the chunks' 7 rows"):
        take_rows([np.arange(3), np.arange(4)], np.array([0, row]), np.int64)


def test_chunks_of_another_width_than_the_result_are_refused() -> None:
    with pytest.raises(ValueError, match="chunk 1: expected items of 8 bytes"):
        take_rows([np.arange(3), np.arange(3, dtype=np.int32)], np.array([0]), np.int64)


def test_strided_chunks_are_refused() -> None:
    with pytest.raises(ValueError, match="chunk 0: expected a contiguous array"):
        take_rows([np.arange(10)[::2]], np.array([0]), np.int64)
