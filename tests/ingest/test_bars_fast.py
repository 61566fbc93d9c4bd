"""The bar aggregation of many symbols at once against a slow per-bar reference."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
import pytest

from ticktensor.ingest.bars import _aggregate, _Runs, _time_bars

SERIES = "_series"


def _trades(
    rng: np.random.Generator, symbols: int, rows: int, ticks: int, holes: bool
) -> pl.DataFrame:
    """Trades sorted by (series, ts) with ``ticks`` distinct times of 100 ms per series."""
    series = np.sort(rng.integers(0, symbols, rows)).astype(np.uint32)
    ts = 10**18 + rng.integers(0, ticks, rows) * 10**8
    order = np.lexsort((ts, series))
    price = 100 + np.round(rng.normal(0, 1, rows), 2)
    size = rng.integers(1, 9, rows).astype(np.float64)
    side = rng.choice([-1.0, 1.0], rows)
    columns = {"price": price, "size": size, "side": side}
    if holes:
        price[rng.random(rows) < 0.1] = np.nan
        columns = {
            name: pl.Series(name, values).set(pl.Series(rng.random(rows) < 0.05), None)
            for name, values in columns.items()
        }
    return pl.DataFrame({SERIES: series[order], "ts": ts[order], **columns})


def _threshold_keys(frame: pl.DataFrame, threshold: float) -> pl.DataFrame:
    """The volume bar of each trade and its series' total volume, straight from the rule."""
    keys: list[int | None] = []
    totals: list[float] = []
    for part in frame.partition_by(SERIES, maintain_order=True):
        before, part_keys = 0.0, []
        for size in part["size"].to_list():
            part_keys.append(None if size is None else math.floor(before / threshold))
            before += size or 0.0
        keys += part_keys
        totals += [before] * part.height
    return frame.with_columns(pl.Series("_key", keys, pl.Int64), pl.Series("_total", totals))


def _sum(values: np.ndarray[Any, np.dtype[np.float64]]) -> float:
    """The sum numpy's ``reduceat`` gives for these values alone."""
    return float(np.add.reduceat(values, [0])[0])


def _reference(frame: pl.DataFrame, firsts: tuple[str, ...]) -> list[dict[str, Any]]:
    """One bar per run of equal (series, bar key): polars' max/min over the run's prices,
    numpy's sum of the run's quantities on their own."""
    rows = frame.to_dicts()
    bars = []
    lo = 0
    for hi in range(1, len(rows) + 1):
        if hi < len(rows) and (rows[hi][SERIES], rows[hi]["_bar"]) == (
            rows[lo][SERIES],
            rows[lo]["_bar"],
        ):
            continue
        run = frame[lo:hi]
        sizes = run["size"].fill_null(0.0).to_numpy()
        signed = (run["side"] * run["size"]).fill_null(0.0).to_numpy()
        dollar = (run["price"] * run["size"]).fill_null(0.0).to_numpy()
        volume, dollar_volume = _sum(sizes), _sum(dollar)
        bars.append(
            {
                SERIES: rows[lo][SERIES],
                "_bar": rows[lo]["_bar"],
                **{name: rows[lo][name] for name in firsts},
                "ts_first": rows[lo]["ts"],
                "ts_last": rows[hi - 1]["ts"],
                "open": rows[lo]["price"],
                "high": run["price"].max(),
                "low": run["price"].min(),
                "close": rows[hi - 1]["price"],
                "trade_count": hi - lo,
                "volume": volume,
                "dollar_volume": dollar_volume,
                "signed_volume": _sum(signed),
                "vwap": dollar_volume / volume if volume > 0 else None,
            }
        )
        lo = hi
    return bars


def _exact(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Every value as its repr: NaN equals NaN, 0.0 differs from -0.0, None from NaN."""
    return [
        {name: repr(float(v) if isinstance(v, np.floating) else v) for name, v in row.items()}
        for row in rows
    ]


SHAPES = {
    "wide: a trade per bar, symbols with one trade": (3_000, 4_000, 36_000),
    "narrow: many trades per bar": (5, 4_000, 30),
    "mixed": (200, 6_000, 600),
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("holes", [False, True])
def test_time_bars_match_the_per_bar_reference(shape: str, holes: bool) -> None:
    symbols, rows, ticks = SHAPES[shape]
    frame = _trades(np.random.default_rng(len(shape) + holes), symbols, rows, ticks, holes)
    bar = pl.col("ts") - pl.col("ts") % 10**9
    got = _aggregate(frame, bar, SERIES)
    want = _reference(frame.with_columns(bar.alias("_bar")), ())
    assert got.columns == list(want[0])
    assert _exact(got.to_dicts()) == _exact(want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("variant", ["plain", "nan prices", "no sides", "one series", "1960s"])
def test_native_time_bars_match_the_generic_aggregation(shape: str, variant: str) -> None:
    """The native kernel (trades without nulls) gives the generic polars/numpy
    aggregation's bars, bit for bit (long runs of several hundred trades too: numpy's
    pairwise sums)."""
    symbols, rows, ticks = SHAPES[shape]
    rng = np.random.default_rng(len(shape) + len(variant))
    frame = _trades(rng, symbols, rows, ticks, holes=False)
    by: str | None = SERIES
    if variant == "nan prices":
        price = frame["price"].to_numpy().copy()
        price[rng.random(rows) < 0.2] = np.nan
        frame = frame.with_columns(pl.Series("price", price))
    elif variant == "no sides":
        frame = frame.drop("side")
    elif variant == "one series":
        frame, by = frame.filter(pl.col(SERIES) == frame[SERIES][0]).drop(SERIES), None
    elif variant == "1960s":  # before the epoch: bars open on the floored grid
        frame = frame.with_columns(pl.col("ts") - 2 * 10**18)
    bar = pl.col("ts") - pl.col("ts") % 10**9
    got = _time_bars(frame, 10**9, by)
    generic = _aggregate(frame, bar, by).rename({"_bar": "ts_event"})
    assert got.schema == generic.schema
    # The generic aggregation is checked against the per-bar reference above.
    assert _exact(got.to_dicts()) == _exact(generic.to_dicts())


def test_native_time_bars_are_taken_only_without_nulls(monkeypatch: pytest.MonkeyPatch) -> None:
    import ticktensor.kernels

    calls = []
    native = ticktensor.kernels.time_bars
    monkeypatch.setattr(ticktensor.kernels, "time_bars", lambda *a: calls.append(1) or native(*a))
    rng = np.random.default_rng(3)
    _time_bars(_trades(rng, 5, 500, 40, holes=False), 10**9, SERIES)
    assert calls == [1]
    _time_bars(_trades(rng, 5, 500, 40, holes=True), 10**9, SERIES)
    assert calls == [1]  # nulls: polars and numpy


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("holes", [False, True])
def test_threshold_bars_match_the_per_bar_reference(shape: str, holes: bool) -> None:
    symbols, rows, ticks = SHAPES[shape]
    frame = _trades(np.random.default_rng(7 + holes), symbols, rows, ticks, holes)
    frame = _threshold_keys(frame, 20.0)
    got = _aggregate(frame, pl.col("_key"), SERIES, ("_total",))
    want = _reference(frame.with_columns(pl.col("_key").alias("_bar")), ("_total",))
    assert _exact(got.to_dicts()) == _exact(want)


@pytest.mark.parametrize("longest", [1, 2, 5, 300])
@pytest.mark.parametrize("share_long", [0.002, 1.0])
@pytest.mark.parametrize("ufunc", [np.add, np.fmax, np.fmin])
def test_runs_reduce_as_reduceat(longest: int, share_long: float, ufunc: np.ufunc) -> None:
    """Runs of one row mostly (a few long ones) or of any length reduce as numpy does."""
    rng = np.random.default_rng(longest)
    lengths = np.where(rng.random(20_000) < share_long, rng.integers(1, longest + 1, 20_000), 1)
    keys = np.repeat(np.arange(20_000), lengths)
    values = rng.normal(0, 1, keys.size)
    values[rng.random(keys.size) < 0.05] = np.nan
    runs = _Runs(pl.DataFrame({"_bar": keys}), ["_bar"])
    assert runs.lengths.sum() == keys.size
    want = ufunc.reduceat(values, runs.starts)
    assert runs.reduce(ufunc, values).tobytes() == want.tobytes()


def test_no_trades_make_no_bars() -> None:
    frame = _trades(np.random.default_rng(0), 3, 0, 10, holes=False)
    got = _aggregate(frame, pl.col("ts") - pl.col("ts") % 10**9, SERIES)
    assert got.height == 0
    assert "vwap" in got.columns
