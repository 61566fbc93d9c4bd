"""Days appended after a partition's stored days: the stored rows of the job's symbols are
put in front of the job's rows as they are (no sort, no duplicate search, no comparison
with the store), and the store, the reports and the refusals are those of the merge that
sorts and compares them, byte for byte; a job with rows on or before a stored day takes
that merge."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.ingest.store_contents import assert_same_latest, data_files, version_records
from ticktensor.errors import VersionConflictError
from ticktensor.ingest import IngestOptions, IngestResult, _assemble, _job, _merge, ingest
from ticktensor.ingest._stored import preceding_rows
from ticktensor.ingest.readers import ReadOptions
from ticktensor.schemas import EventKind

DAY_NS = 86_400 * 10**9
HOUR_NS = 3_600 * 10**9
HEADER = "ts_event,symbol,open,high,low,close,volume\n"
#: 2022-01-08: days 0..30 of the tests cross a month's end.
FIRST_DAY = 19_000
SYMBOLS = ("AAA", "BBB", "CCC")

#: An hourly bar: (day, hour, symbol, price shift); shift 0 gives the history's values.
Bar = tuple[int, int, str, float]


def _line(bar: Bar) -> str:
    day, hour, symbol, shift = bar
    close = 50.0 + 0.37 * day + 0.05 * hour + SYMBOLS.index(symbol) + shift
    ts = (FIRST_DAY + day) * DAY_NS + (14 + hour) * HOUR_NS
    return f"{ts},{symbol},{close:.4f},{close + 1:.4f},{close - 1:.4f},{close + 0.25:.4f},1000\n"


def _write(path: Path, bars: list[Bar]) -> Path:
    path.write_text(HEADER + "".join(_line(b) for b in bars))
    return path


def _history(days: int, symbols: tuple[str, ...], hours: tuple[int, ...] = (0,)) -> list[Bar]:
    return [(d, h, s, 0.0) for d in range(days) for h in hours for s in symbols]


def _outcome(result: IngestResult) -> dict[str, Any]:
    assert result.rows_read == result.rows_stored + result.rows_quarantined
    return {
        "files": [
            (f.rows_read, f.rows_stored, f.rows_quarantined, f.rules, f.examples)
            for f in result.files
        ],
        "notes": result.notes,
        "packs": result.packs,
        "series": result.series,
        "published": result.published,
    }


def _ingest(
    jobs: list[list[Path]], store: Path, partition: str, replace: bool, workers: int
) -> list[Any]:
    """Each job in turn (the first builds the history): its outcome, or the refusal."""
    outcomes: list[Any] = []
    for number, inputs in enumerate(jobs):
        read = ReadOptions(kind=EventKind.OHLCV, interval_ns=HOUR_NS)
        options = IngestOptions(
            read=read,
            partition=partition,  # type: ignore[arg-type]
            replace=replace and number > 0,
            workers=workers,
        )
        try:
            result = ingest([str(p) for p in inputs], str(store), options, progress=False)
        except VersionConflictError as exc:
            outcomes.append(str(exc).replace(str(store), "STORE"))
            continue
        outcomes.append(_outcome(result))
    return outcomes


def _never(job: list[pa.Table], stored: pa.Table) -> None:
    """``preceding_rows`` of the merge that sorts and compares: never any."""


def _both(
    work: Path,
    jobs: list[list[Path]],
    partition: str,
    replace: bool = False,
    block_rows: int | None = None,
) -> tuple[list[Any], int]:
    """The jobs into a store as ingest writes it and into another through the merge
    that sorts and compares every carried row: asserts the two hold the same bytes and
    records and that the jobs report the same; their outcomes and how many blocks took
    the short merge. ``block_rows``: sessions cut into blocks of about so many rows, on
    two threads, instead of small sessions on their task's thread."""
    with contextlib.ExitStack() as stack:
        workers = 1
        if block_rows is not None:
            m = stack.enter_context(pytest.MonkeyPatch.context())
            m.setattr(_job, "BLOCK_ROWS", block_rows)
            m.setattr(_job, "INLINE_ROWS", -1)
            workers = 2
        with _short_merges() as taken:
            outcomes = _ingest(jobs, work / "short", partition, replace, workers)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(_assemble, "preceding_rows", _never)
            assert _ingest(jobs, work / "full", partition, replace, workers) == outcomes
    assert version_records(work / "short") == version_records(work / "full")
    short_files, full_files = data_files(work / "short"), data_files(work / "full")
    assert sorted(short_files) == sorted(full_files)
    for path, data in short_files.items():
        assert data == full_files[path], path
    return outcomes, len(taken)


@contextlib.contextmanager
def _short_merges() -> Iterator[list[int]]:
    """The blocks whose merge put stored rows in front of the job's (their symbols)."""
    taken: list[int] = []
    real = _merge._Before.put_in_front

    def spy(before: Any, merged: Any, first: int, end: int) -> Any:
        taken.append(end - first)
        return real(before, merged, first, end)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(_merge._Before, "put_in_front", spy)
        yield taken


@pytest.fixture
def work() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tt-appended-") as tmp:
        yield Path(tmp)


def test_a_day_after_the_stored_ones_takes_the_short_merge(work: Path) -> None:
    history = _write(work / "history.csv", _history(25, SYMBOLS, (0, 1)))
    day = _write(work / "day.csv", [(25, h, s, 0.0) for h in range(2) for s in SYMBOLS[:2]])
    new_symbol = _write(work / "ddd.csv", [(26, 0, "AAA", 0.0), (26, 0, "CCC", 0.0)])
    outcomes, taken = _both(work, [[history], [day], [new_symbol]], "all")
    assert all(o["published"] for o in outcomes)
    assert taken == 2  # the two appended days, each one block
    # In blocks of a symbol or two, on threads: each block with stored rows of its own.
    outcomes, taken = _both(work / "blocks", [[history], [day], [new_symbol]], "all", block_rows=60)
    assert all(o["published"] for o in outcomes)
    assert taken == 4


def test_a_day_overlapping_the_last_stored_day_is_merged_and_compared(work: Path) -> None:
    history = _write(work / "history.csv", _history(25, SYMBOLS, (0, 1)))
    # A later hour of the last stored day: the day's stored rows differ from the job's.
    later_hour = _write(work / "later.csv", [(24, 5, "AAA", 0.0)])
    outcomes, taken = _both(work, [[history], [later_hour]], "all")
    assert taken == 0
    assert isinstance(outcomes[1], str)
    assert "session all already exists" in outcomes[1]
    assert "symbol AAA" in outcomes[1]
    # With replace, the job's rows of that day take the place of the stored ones.
    outcomes, taken = _both(work / "replace", [[history], [later_hour]], "all", replace=True)
    assert taken == 0
    assert outcomes[1]["published"]


def test_a_day_after_a_bar_closing_at_midnight_compares_features_alike(work: Path) -> None:
    # The 23:00 bar's feature row has its close time, 00:00 of the appended day: the
    # events take the short merge, the feature rows are compared on that day as the
    # full merge compares them.
    history = _write(work / "history.csv", [*_history(12, SYMBOLS[:1]), (11, 9, "AAA", 0.0)])
    day = _write(work / "day.csv", [(12, 0, "AAA", 0.0)])
    _, taken = _both(work, [[history], [day]], "all")
    assert taken == 1


@pytest.mark.parametrize("partition", ["all", "month"])
def test_a_day_of_24_hourly_bars_appends_as_if_ingested_at_once(work: Path, partition: str) -> None:
    # Every hour of each day: the last stored feature row (the 23:00 bar's, stamped at its
    # close) is on the appended day. That append was refused ("its features differ")
    # because the feature rows of that day were compared as a whole.
    every_hour = tuple(range(-14, 10))  # 00:00 to 23:00 UTC
    history = _history(6, SYMBOLS[:2], every_hour)
    day = [(6, h, s, 0.0) for h in every_hour for s in SYMBOLS[:2]]
    appended, at_once = work / "appended", work / "at-once"
    outcomes = _ingest(
        [[_write(work / "history.csv", history)], [_write(work / "day.csv", day)]],
        appended,
        partition,
        replace=False,
        workers=1,
    )
    assert all(isinstance(o, dict) and o["published"] for o in outcomes), outcomes
    both = [work / "history.csv", work / "day.csv"]  # one job of the same two files
    (whole,) = _ingest([both], at_once, partition, False, 1)
    assert whole["published"]
    assert_same_latest(appended, at_once)


def test_a_day_before_the_last_stored_day_is_merged_in_time_order(work: Path) -> None:
    history = _write(work / "history.csv", [b for b in _history(25, SYMBOLS) if b[0] != 10])
    backfill = _write(work / "backfill.csv", [(10, 0, s, 0.0) for s in SYMBOLS])
    # The day changes the features of the days after it: refused, or merged with replace.
    outcomes, taken = _both(work, [[history], [backfill]], "all")
    assert taken == 0
    assert "(its features differ)" in outcomes[1]
    outcomes, taken = _both(work / "replace", [[history], [backfill]], "all", replace=True)
    assert taken == 0
    assert outcomes[1]["published"]


def test_preceding_rows_need_every_stored_row_before_the_jobs_first_day() -> None:
    def table(rows: list[tuple[str, int]]) -> pa.Table:
        return pa.table(
            {
                "symbol": pa.array([s for s, _ in rows], pa.string()),
                "ts_event": pa.array([t for _, t in rows], pa.int64()),
            }
        )

    stored = table([("A", 0), ("A", DAY_NS), ("B", 0), ("C", 5 * DAY_NS)])
    found = preceding_rows([table([("A", 2 * DAY_NS), ("B", 2 * DAY_NS)])], stored)
    assert found is not None
    assert found.column("ts_event").to_pylist() == [0, DAY_NS, 0]  # C is not the job's
    assert preceding_rows([table([("A", DAY_NS + 1)])], stored) is None  # a stored day
    assert preceding_rows([table([("B", DAY_NS // 2)])], stored) is None  # day 0: B's
    assert preceding_rows([table([("C", 6 * DAY_NS)])], stored) is not None
    assert preceding_rows([table([("D", 9 * DAY_NS)])], stored) == stored.slice(0, 0)
    # Stored rows not in strictly increasing time, or not grouped by symbol: the merge sorts.
    ties = table([("A", 0), ("A", 0)])
    assert preceding_rows([table([("A", 3 * DAY_NS)])], ties) is None
    unsorted = table([("B", 0), ("A", DAY_NS)])
    assert preceding_rows([table([("A", 3 * DAY_NS), ("B", 3 * DAY_NS)])], unsorted) is None
    assert preceding_rows([table([("A", 3 * DAY_NS)])], unsorted) is not None


#: A job's bars: days mostly after the history's (the short merge), some on or before it.
bars = st.tuples(
    st.one_of(st.integers(12, 16), st.integers(0, 16)),
    st.sampled_from([0, 1, 9]),  # 14:00, 15:00 and 23:00 (it closes on the next day)
    st.sampled_from(SYMBOLS),
    st.sampled_from([0.0, 0.0, 0.5]),
)


@settings(max_examples=25, deadline=None)
@given(
    history_days=st.integers(2, 12),
    symbols=st.sampled_from([SYMBOLS[:1], SYMBOLS[:2], SYMBOLS]),
    hours=st.sampled_from([(0,), (0, 1), (0, 9)]),
    jobs=st.lists(st.lists(bars, min_size=1, max_size=5), min_size=1, max_size=3),
    twice=st.booleans(),
    partition=st.sampled_from(["all", "month"]),
    replace=st.booleans(),
    block_rows=st.sampled_from([None, 9]),
)
def test_appended_days_store_what_the_full_merge_stores(
    history_days: int,
    symbols: tuple[str, ...],
    hours: tuple[int, ...],
    jobs: list[list[Bar]],
    twice: bool,
    partition: str,
    replace: bool,
    block_rows: int | None,
) -> None:
    with tempfile.TemporaryDirectory(prefix="tt-appended-") as tmp:
        work = Path(tmp)
        inputs = [[_write(work / "history.csv", _history(history_days, symbols, hours))]]
        for number, job in enumerate(jobs):
            # A row twice in a file: a duplicate, quarantined alike either way.
            rows = job + job[:1] if twice else job
            inputs.append([_write(work / f"job-{number}.csv", rows)])
        outcomes, taken = _both(work, inputs, partition, replace, block_rows)
        event("short merges" if taken else "no short merge")
        event(f"{sum(isinstance(o, str) for o in outcomes)} job(s) refused")
