"""The native counting sort by key: checked against numpy's stable argsort of every row's
key (the slow, obviously correct reference)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticktensor.kernels import order_by_key

CODE_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@settings(max_examples=80, deadline=None)
@given(
    n_keys=st.integers(1, 40),
    data=st.data(),
)
def test_matches_a_stable_argsort_of_the_keys(n_keys: int, data: st.DataObject) -> None:
    chunks = []
    for _ in range(data.draw(st.integers(0, 6))):
        table = np.array(
            data.draw(st.lists(st.integers(0, n_keys - 1), min_size=1, max_size=12)),
            dtype=np.uint32,
        )
        dtype = data.draw(st.sampled_from(CODE_DTYPES))
        codes = data.draw(st.lists(st.integers(0, len(table) - 1), max_size=60))
        chunks.append((np.array(codes, dtype=dtype), table))
    keys = np.concatenate(
        [np.empty(0, np.uint32)] + [table[codes.astype(np.intp)] for codes, table in chunks]
    )
    order, counts = order_by_key(chunks, n_keys)
    assert order.dtype == np.int64
    assert counts.dtype == np.int64
    assert np.array_equal(order, np.argsort(keys, kind="stable"))
    assert np.array_equal(counts, np.bincount(keys, minlength=n_keys))


def test_codes_from_a_slice_read_from_its_offset() -> None:
    table = np.array([1, 0], dtype=np.uint32)
    codes = np.array([9, 0, 1, 1, 0], dtype=np.int32)[1:4]  # a view that starts past row 0
    order, counts = order_by_key([(codes, table)], 2)
    assert order.tolist() == [1, 2, 0]
    assert counts.tolist() == [2, 1]


def test_no_chunks_and_no_keys() -> None:
    order, counts = order_by_key([], 3)
    assert order.size == 0
    assert counts.tolist() == [0, 0, 0]
    order, counts = order_by_key([], 0)
    assert order.size == 0
    assert counts.size == 0


@pytest.mark.parametrize("bad", [2, -1])
def test_a_code_outside_its_table_is_named(bad: int) -> None:
    table = np.array([0, 1], dtype=np.uint32)
    with pytest.raises(IndexError, match=rf"chunk 1 row 2: code {bad} is outside its key table"):
        order_by_key([(np.zeros(3, np.int16), table), (np.array([0, 1, bad], np.int16), table)], 2)


def test_a_key_beyond_the_keys_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk 0: key table entry 1 is 5, not below the 3 keys"):
        order_by_key([(np.zeros(2, np.int32), np.array([0, 5], np.uint32))], 3)


@pytest.mark.parametrize(
    ("chunk", "message"),
    [
        ((np.zeros(2, np.float64), np.zeros(1, np.uint32)), "codes: expected integers"),
        ((np.zeros(4, np.int32)[::2], np.zeros(1, np.uint32)), "expected a contiguous array"),
        ((np.zeros(2, np.int32),), r"expected a \(codes, keys\) tuple"),
        (np.zeros(2, np.int32), r"expected a \(codes, keys\) tuple"),
    ],
)
def test_malformed_chunks_are_refused(chunk: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        order_by_key([chunk], 1)  # type: ignore[list-item]


def test_negative_key_count_is_refused() -> None:
    with pytest.raises(ValueError, match="n_keys must be >= 0"):
        order_by_key([], -1)
