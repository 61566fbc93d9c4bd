"""Small sessions and small files take the short path (no threads): the same store, byte
for byte, and the same reports as the general path of the same job."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.ingest.store_contents import data_files, version_records
from ticktensor.errors import VersionConflictError
from ticktensor.ingest import IngestOptions, IngestResult, _assemble, _convert, _job, ingest
from ticktensor.ingest.readers import ReadOptions
from ticktensor.schemas import EventKind

DAY_NS = 86_400 * 10**9
MINUTE_NS = 60 * 10**9
HEADER = "ts_event,symbol,open,high,low,close,volume\n"

#: A job's inputs, its partition and the bar length.
Job = tuple[list[Path], str, int]


def _bar(ts: int, symbol: str, close: float) -> str:
    return f"{ts},{symbol},{close:.4f},{close + 1:.4f},{close - 1:.4f},{close + 0.25:.4f},1000\n"


def _daily(path: Path, days: range, symbols: tuple[str, ...], shift: float = 0.0) -> Path:
    rows = [
        _bar((19_000 + d) * DAY_NS, s, 50.0 + 0.1 * d + ord(s[0]) - ord("A") + shift)
        for d in days
        for s in symbols
    ]
    path.write_text(HEADER + "".join(rows))
    return path


def _minutes(path: Path, day: int, minutes: range, symbols: tuple[str, ...]) -> Path:
    rows = [
        _bar(day * DAY_NS + m * MINUTE_NS, s, 20.0 + 0.01 * m + j)
        for m in minutes
        for j, s in enumerate(symbols)
    ]
    path.write_text(HEADER + "".join(rows))
    return path


def _daily_jobs(work: Path) -> list[Job]:
    """Twenty weeks of two symbols' daily bars into one partition, then an appended day
    of one symbol, the same day again (unchanged) and that day with other values."""
    history = _daily(work / "history.csv", range(140), ("AAA", "BBB"))
    day = _daily(work / "day.csv", range(140, 141), ("AAA",))
    other = _daily(work / "other.csv", range(140, 141), ("AAA",), shift=1.0)
    return [([p], "auto", DAY_NS) for p in (history, day, day, other)]


def _month_jobs(work: Path) -> list[Job]:
    """A month partition of three symbols, then a day of two of them, one day overlapping."""
    first = _daily(work / "first.csv", range(40), ("AAA", "BBB", "CCC"))
    more = _daily(work / "more.csv", range(39, 45), ("AAA", "CCC"))
    return [([first], "month", DAY_NS), ([more], "month", DAY_NS)]


def _intraday_jobs(work: Path) -> list[Job]:
    """Minute bars of two days in two files that share rows (cross-file duplicates), one
    row broken (quarantined), then a third day."""
    a = _minutes(work / "a.csv", 19_000, range(120), ("AAA", "BBB"))
    b = _minutes(work / "b.csv", 19_000, range(100, 200), ("AAA",))
    with b.open("a") as f:
        f.write(_bar(19_001 * DAY_NS, "AAA", -5.0))  # a negative price
        f.write(_bar(19_001 * DAY_NS + MINUTE_NS, "AAA", 21.0))
    c = _minutes(work / "c.csv", 19_002, range(60), ("AAA", "BBB"))
    return [([a, b], "day", MINUTE_NS), ([c], "day", MINUTE_NS)]


JOBS: dict[str, Callable[[Path], list[Job]]] = {
    "daily-all": _daily_jobs,
    "daily-month": _month_jobs,
    "intraday-day": _intraday_jobs,
}


def _run(jobs: list[Job], store: Path) -> list[Any]:
    """Each job in turn: its result's accounting and notes, or the refusal's message."""
    outcomes: list[Any] = []
    for inputs, partition, interval in jobs:
        read = ReadOptions(kind=EventKind.OHLCV, interval_ns=interval)
        options = IngestOptions(read=read, partition=partition)  # type: ignore[arg-type]
        try:
            result = ingest([str(p) for p in inputs], str(store), options, progress=False)
        except VersionConflictError as exc:
            outcomes.append(str(exc))
            continue
        outcomes.append(_outcome(result))
    return outcomes


def _outcome(result: IngestResult) -> dict[str, Any]:
    assert result.rows_read == result.rows_stored + result.rows_quarantined
    return {
        "files": [
            (f.file, f.rows_read, f.rows_stored, f.rows_quarantined, f.rules, f.examples)
            for f in result.files
        ],
        "notes": result.notes,
        "packs": result.packs,
        "series": result.series,
        "partition": result.partition,
        "published": result.published,
    }


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """The thread pools the jobs' sessions started: (threads, name)."""
    started: list[tuple[int, str]] = []
    real = _assemble.ThreadPoolExecutor

    def spy(threads: int, thread_name_prefix: str) -> ThreadPoolExecutor:
        started.append((threads, thread_name_prefix))
        return real(threads, thread_name_prefix=thread_name_prefix)

    monkeypatch.setattr(_assemble, "ThreadPoolExecutor", spy)
    return started


@pytest.mark.parametrize("case", sorted(JOBS))
def test_short_path_stores_what_the_general_path_stores(
    case: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pools: list[tuple[int, str]],
) -> None:
    work = tmp_path / "inputs"
    work.mkdir()
    jobs = JOBS[case](work)

    short = _run(jobs, tmp_path / "short")
    # The short path ran: every session on its task's thread and one beside it.
    assert pools
    assert all(threads == 1 for threads, _ in pools)
    pools.clear()

    with monkeypatch.context() as m:
        m.setattr(_job, "INLINE_ROWS", -1)  # every session through the blocks' threads
        m.setattr(_convert, "SMALL_FILE_BYTES", -1)  # every file decoded on its own thread
        general = _run(jobs, tmp_path / "general")
    assert any(name == "ticktensor-tables" and threads > 1 for threads, name in pools)

    assert short == general
    assert version_records(tmp_path / "short") == version_records(tmp_path / "general")
    short_files, general_files = data_files(tmp_path / "short"), data_files(tmp_path / "general")
    assert sorted(short_files) == sorted(general_files)
    for path, data in short_files.items():
        assert data == general_files[path], path
