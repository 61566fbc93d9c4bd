"""``ticktensor ingest --stats-period``: normalization statistics over a declared period only,
so ``WindowDataset(normalize=True)`` works on a store made by the command line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ticktensor.cli import main
from ticktensor.errors import ConfigError
from ticktensor.kernels import ThreadPool
from ticktensor.loaders import WindowDataset
from ticktensor.store import StoreVersion, open_store

DAY_NS = 86_400 * 10**9
DAY0 = 1_704_153_600 * 10**9  # 2024-01-02 00:00 UTC
OPEN = 14 * 3600 * 10**9 + 30 * 60 * 10**9  # 14:30 UTC


def write_day(path: Path, day: int, seed: int) -> Path:
    """20 minutes of AAA trades, two a second; each day has its own price level and noise."""
    rng = np.random.default_rng(seed)
    n = 2400
    ts = DAY0 + day * DAY_NS + OPEN + np.arange(n, dtype=np.int64) * 500_000_000
    price = (100.0 + 50 * day) * np.exp(np.cumsum(rng.normal(0, 1e-3 * (1 + day), n)))
    size = rng.integers(1, 100, n)
    lines = ["ts_event,symbol,price,size,side"]
    lines += [f"{t},AAA,{p:.4f},{s},1" for t, p, s in zip(ts, price, size, strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def ingest(*args: str) -> int:
    return main(["ingest", *args, "--schema", "trades", "--workers", "1", "--quiet"])


def numpy_stats(version: StoreVersion, start: int, end: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Mean and population std of every feature over the rows with start <= ts < end."""
    series = [version.read_segment(s) for s in version.segments]
    series += [version.read_pack(p) for p in version.packs]
    rows = [d.values[(d.ts >= start) & (d.ts < end)].astype(np.float64) for d in series]
    values = np.concatenate(rows)
    return np.nanmean(values, axis=0), np.nanstd(values, axis=0), values.shape[0]


@pytest.mark.parametrize(
    ("period", "start", "end"),
    [
        ("2024-01-02:2024-01-03", DAY0, DAY0 + DAY_NS),
        (
            "2024-01-02T14:35:2024-01-02T14:45Z",
            DAY0 + OPEN + 300 * 10**9,
            DAY0 + OPEN + 900 * 10**9,
        ),
    ],
)
def test_normalize_works_with_stats_of_the_period_only(
    tmp_path: Path, period: str, start: int, end: int
) -> None:
    days = [write_day(tmp_path / f"day{d}.csv", d, seed=d) for d in (0, 1)]
    out = str(tmp_path / "store")
    assert ingest(*map(str, days), "--out", out, "--stats-period", period) == 0
    version = open_store(out)
    stats = version.stats
    assert stats is not None
    assert stats.period == (start, end)
    mean, std, count = numpy_stats(version, start, end)
    assert stats.count == count
    assert 0 < count < version.rows  # the period holds some rows, not all
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(stats.std, std, rtol=1e-5, atol=1e-9)
    everything = numpy_stats(version, 0, 2**63 - 1)
    assert not np.allclose(stats.mean, everything[0])  # so the period made a difference

    plain = WindowDataset(version, 8, pool=ThreadPool(1))
    normed = WindowDataset(version, 8, normalize=True, pool=ThreadPool(1))
    idx = np.arange(0, len(plain), 37)
    x, _ = plain.get_batch(idx)
    z, _ = normed.get_batch(idx)
    scale = np.where(np.isfinite(std) & (std > 0), std, 1.0)
    np.testing.assert_allclose(z, (x - mean) / scale, rtol=1e-4, atol=1e-4)


def test_without_the_flag_normalize_has_no_statistics(tmp_path: Path) -> None:
    out = str(tmp_path / "store")
    assert ingest(str(write_day(tmp_path / "day0.csv", 0, seed=0)), "--out", out) == 0
    with pytest.raises(ConfigError, match="no feature statistics"):
        WindowDataset(open_store(out), 8, normalize=True)


def test_the_period_stays_with_the_store(tmp_path: Path) -> None:
    out = str(tmp_path / "store")
    day0, day1 = (write_day(tmp_path / f"day{d}.csv", d, seed=d) for d in (0, 1))
    assert ingest(str(day0), "--out", out, "--stats-period", "2024-01-02:2024-01-03") == 0
    first = open_store(out)
    assert ingest(str(day1), "--out", out) == 0  # a later day, no flag
    second = open_store(out)
    assert second.version == first.version + 1
    assert second.stats == first.stats  # day 1 lies outside the declared period


def test_a_period_without_rows_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    day0 = write_day(tmp_path / "day0.csv", 0, seed=0)
    assert (
        ingest(str(day0), "--out", str(tmp_path / "s"), "--stats-period", "2023-01-02:2023-01-03")
        == 0
    )
    assert (
        "note: no feature rows fall in the stats period 2023-01-02T00:00:00Z .. "
        "2023-01-03T00:00:00Z (end exclusive): version 1 has no normalization statistics"
    ) in capsys.readouterr().out


@pytest.mark.parametrize(
    ("period", "message"),
    [
        ("2024-01-03:2024-01-02", "start before it ends, got start 2024-01-03 and end 2024-01-02"),
        ("2024-01-02:2024-01-02", "start before it ends"),
        ("2024-01-02", "expected START:END, each a date or an ISO timestamp"),
        ("last week:today", "got 'last week:today'"),
    ],
)
def test_a_bad_period_is_a_usage_error_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], period: str, message: str
) -> None:
    day0 = write_day(tmp_path / "day0.csv", 0, seed=0)
    with pytest.raises(SystemExit) as exit_:
        ingest(str(day0), "--out", str(tmp_path / "s"), "--stats-period", period)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "ticktensor ingest: error: argument --stats-period: " in err
    assert message in err
    assert not (tmp_path / "s").exists()
