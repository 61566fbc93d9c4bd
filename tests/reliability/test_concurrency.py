"""Readers never see partial data while a writer commits; racing writers lose no update."""

from __future__ import annotations

from pathlib import Path

import pytest

from ticktensor.reliability.concurrency import readers_during_commits, two_writers


@pytest.mark.slow
def test_readers_in_threads_and_processes_during_commits(tmp_path: Path) -> None:
    result = readers_during_commits(str(tmp_path / "s"), commits=5, threads=2, processes=1)
    assert result.errors == []
    assert result.commits == 5
    assert result.reads >= 3
    assert result.versions_seen <= set(range(1, 7))


def test_two_writer_threads_one_wins_the_other_retries(tmp_path: Path) -> None:
    result = two_writers(str(tmp_path / "s"), processes=False, rounds=4)
    assert result.errors == []
    assert result.conflicts == 4  # each round: exactly one VersionConflictError, then a retry
    assert result.commits == 8


@pytest.mark.slow
def test_two_writer_processes_one_wins_the_other_retries(tmp_path: Path) -> None:
    result = two_writers(str(tmp_path / "s"), processes=True, rounds=1)
    assert result.errors == []
    assert result.conflicts == 1
    assert result.commits == 2
