"""The native float32 matrix of float64 columns, against numpy's cast of the columns
stacked (the slow, obviously correct reference)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ticktensor import _native
from ticktensor.kernels import stack_columns_f32


@settings(max_examples=80, deadline=None)
@given(
    rows=st.integers(0, 3_000),
    n_columns=st.integers(0, 9),
    data=st.data(),
)
def test_matches_numpys_cast_of_the_stacked_columns(
    rows: int, n_columns: int, data: st.DataObject
) -> None:
    # Any float64: beyond float32's range, subnormal, NaN, +/-0, +/-inf.
    columns = [data.draw(arrays(np.float64, rows)) for _ in range(n_columns)]
    out = stack_columns_f32(columns, rows)
    reference = np.empty((rows, n_columns), np.float32)
    with np.errstate(over="ignore"):
        for j, column in enumerate(columns):
            reference[:, j] = column.astype(np.float32)
    assert out.shape == (rows, n_columns)
    assert out.dtype == np.float32
    # Bit for bit: NaNs, signed zeros and infinities as numpy gives them.
    assert out.tobytes() == reference.tobytes()


def test_rows_of_other_lengths_and_dtypes_are_refused() -> None:
    out = np.empty((3, 2), np.float32)
    with pytest.raises(ValueError, match="column 1: expected 3 rows"):
        _native.stack_columns_f32([np.zeros(3), np.zeros(4)], out)
    with pytest.raises(ValueError, match="column 0: expected a contiguous 1-D float64"):
        _native.stack_columns_f32([np.zeros(3, np.float32), np.zeros(3)], out)
    with pytest.raises(ValueError, match="out: expected 3 columns"):
        _native.stack_columns_f32([np.zeros(3)] * 3, out)


def test_the_facade_converts_strided_and_integer_columns() -> None:
    column = np.arange(8, dtype=np.float64)[::2]
    out = stack_columns_f32([column, np.array([1, 2, 3, 4])], 4)
    assert out.tolist() == [[0.0, 1.0], [2.0, 2.0], [4.0, 3.0], [6.0, 4.0]]
