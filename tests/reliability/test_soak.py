"""Soak: 200 loader epochs (and 50 on zstd chunks with the prefetcher) without leaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from ticktensor.loaders import FastOptions
from ticktensor.reliability.soak import make_soak_store, proc_stats, soak


def test_proc_stats_are_plausible() -> None:
    rss, threads, fds = proc_stats()
    assert rss > 10 << 20
    assert threads >= 1
    assert fds >= 3


@pytest.mark.slow
def test_200_epochs_keep_rss_threads_and_fds_flat(tmp_path: Path) -> None:
    url = make_soak_store(str(tmp_path / "raw"), "none", rows=3000)
    result = soak(url, 200)
    assert result.batches > 200 * 100
    assert result.leaks == [], result.leaks
    assert result.rss_slope_kib < 64  # KiB per epoch, fitted after the warm-up


@pytest.mark.slow
def test_50_epochs_on_zstd_chunks_with_prefetch_keep_flat(tmp_path: Path) -> None:
    url = make_soak_store(str(tmp_path / "zstd"), "zstd", rows=3000)
    result = soak(url, 50, loader_kwargs={"fast": FastOptions(prefetch=2)})
    assert result.leaks == [], result.leaks
    assert result.rss_slope_kib < 256


def test_leak_rules_tell_a_trend_from_a_transient() -> None:
    from ticktensor.reliability.soak import SoakResult, _find_leaks

    flat = SoakResult("t", 40, rss=[100 << 20] * 40, threads=[5] * 40, fds=[9] * 40)
    flat.threads[20] = 6  # a prefetch thread caught alive once
    _find_leaks(flat, 32 << 20)
    assert flat.leaks == []
    leaking = SoakResult(
        "t",
        40,
        rss=[(100 << 20) + i * (2 << 20) for i in range(40)],
        threads=[5 + i // 10 for i in range(40)],
        fds=[9 + i for i in range(40)],
    )
    _find_leaks(leaking, 32 << 20)
    assert [leak.split()[0] for leak in leaking.leaks] == ["RSS", "threads:", "file"]
