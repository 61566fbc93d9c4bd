"""Options and workload: defaults are D1, invalid values are ConfigErrors naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest

from ticktensor.bench import BenchOptions, Workload
from ticktensor.bench.options import default_thread_counts
from ticktensor.bench.sweeps import sweep_values
from ticktensor.errors import ConfigError


def test_d1_is_the_default() -> None:
    w = Workload()
    assert (w.symbols, w.rows, w.features, w.window, w.batch) == (16, 1_000_000, 32, 128, 256)
    assert w.sample_bytes == 4 * (128 * 32 + 1)
    assert w.nbytes == 16 * 1_000_000 * 128
    assert w.store_dir("zstd").name == "store-zstd"
    assert w.resized(1000).rows == 1000


def test_workload_checks() -> None:
    with pytest.raises(ConfigError, match="rows 10 is shorter than the window 20"):
        Workload(rows=10, window=20)
    with pytest.raises(ConfigError, match="batch"):
        Workload(batch=0)


def test_generated_series_are_deterministic(tmp_path: Path) -> None:
    w = Workload(symbols=2, rows=200, features=3, window=8, cache_dir=tmp_path)
    first = [s.values.sum() for s in w.series()]
    assert first == [s.values.sum() for s in w.series()]
    assert [s.symbol for s in w.series()] == ["S000", "S001"]


def test_options() -> None:
    o = BenchOptions(threads=3)
    assert o.threads == 3
    assert o.step_ms == (1.0, 5.0, 20.0)
    assert o.thread_counts[0] == 1
    with pytest.raises(ConfigError, match="seconds"):
        BenchOptions(seconds=0)
    with pytest.raises(ConfigError, match="codec"):
        BenchOptions(codec="gzip")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="order"):
        BenchOptions(order="random")  # type: ignore[arg-type]


def test_thread_counts_and_sweep_points() -> None:
    assert default_thread_counts(1) == (1,)
    assert default_thread_counts(2) == (1, 2)
    assert default_thread_counts(6) == (1, 2, 4, 6)
    points = sweep_values(Workload(rows=1000, window=64), quick=True)
    assert points["rows"] == [250, 500, 1000]
    assert points["window"] == [32, 128, 512]


def test_a_store_given_with_store_becomes_the_workload(tmp_path: Path) -> None:
    from ticktensor.bench.workload import prepare

    generated = Workload(
        symbols=2, rows=300, features=3, window=8, chunk_rows=64, cache_dir=tmp_path
    )
    prepare(generated, ["none"], say=lambda _: None)
    url = str(generated.store_dir("none"))
    w = Workload.from_store(url, window=16, cache_dir=tmp_path / "other")
    assert (w.symbols, w.rows, w.features, w.window, w.source) == (2, 300, 3, 16, url)
    series = list(w.series())
    assert [s.symbol for s in series] == ["S000", "S001"]
    original = list(generated.series())
    assert (series[1].values == original[1].values).all()
    assert w.data_dir != generated.data_dir
