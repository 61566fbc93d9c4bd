"""The native time-bar kernel's checks of its inputs and outputs (its bars are compared with
the polars/numpy aggregation's in tests/ingest/test_bars_fast.py)."""

from __future__ import annotations

import numpy as np
import pytest

from ticktensor import _native
from ticktensor.kernels import time_bars

TS = np.array([-7, 0, 4, 10, 12, 25], dtype=np.int64)
PRICE = np.array([5.0, 1.0, 3.0, 2.0, np.nan, 4.0])
SIZE = np.array([1.0, 1.0, 1.0, 2.0, 2.0, 3.0])


def _outputs(runs: int, long_runs: int, long_rows: int) -> list[np.ndarray]:
    i8, f8 = np.int64, np.float64
    return [
        *(np.empty(runs, i8) for _ in range(3)),
        *(np.empty(runs, f8) for _ in range(4)),
        np.empty(runs, np.uint64),
        *(np.empty(runs, f8) for _ in range(3)),
        np.empty(long_runs, i8),
        np.empty(long_runs, i8),
        *(np.empty(long_rows, f8) for _ in range(3)),
    ]


def test_bars_open_on_the_floored_grid_and_skip_nan_prices() -> None:
    bars = time_bars(None, TS, PRICE, SIZE, np.array([1.0, -1, 1, 1, -1, 1]), 10)
    assert bars.bar.tolist() == [-10, 0, 10, 20]
    assert bars.trades.tolist() == [1, 2, 2, 1]
    assert bars.high.tolist() == [5.0, 3.0, 2.0, 4.0]  # NaN counts only when alone
    assert bars.signed_volume.tolist() == [1.0, 0.0, 0.0, 3.0]
    assert bars.ts_first.tolist() == [-7, 0, 10, 25]
    assert bars.ts_last.tolist() == [-7, 4, 12, 25]


def test_series_start_new_bars() -> None:
    series = np.array([0, 0, 1, 1, 1, 2], dtype=np.uint32)
    bars = time_bars(series, np.array([0, 1, 2, 3, 11, 12]), PRICE, SIZE, None, 10)
    assert bars.series is not None
    assert bars.series.tolist() == [0, 1, 1, 2]
    assert bars.trades.tolist() == [2, 2, 1, 1]


@pytest.mark.parametrize(
    ("sizes", "message"),
    [((3, 2, 4), "more bars"), ((4, 1, 4), "more trades"), ((5, 2, 4), "fewer")],
)
def test_arrays_of_another_size_than_the_bars_are_refused(
    sizes: tuple[int, int, int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _native.time_bars(None, TS, PRICE, SIZE, None, 10, None, *_outputs(*sizes))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="interval: expected a positive"):
        time_bars(None, TS, PRICE, SIZE, None, 0)
    with pytest.raises(ValueError, match="series: expected 6 items"):
        time_bars(np.zeros(2, np.uint32), TS, PRICE, SIZE, None, 10)
    with pytest.raises(ValueError, match="price: expected 6 items"):
        _native.time_bars(None, TS, PRICE[:2], SIZE, None, 10, None, *_outputs(4, 2, 4))


def test_no_trades_make_no_bars() -> None:
    empty = np.empty(0)
    bars = time_bars(None, np.empty(0, np.int64), empty, empty, None, 10)
    assert bars.bar.size == 0
