"""Days of one kind appended to a session whose features read two (the quotes clock joins
trades as of each quote): the session's features are computed from the stored rows of the
other kind too, so the store holds what one ingest of all the files writes."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ingest.store_contents import assert_same_latest
from ticktensor.errors import VersionConflictError
from ticktensor.ingest import IngestOptions, IngestResult, _job, ingest

DAY_NS = 86_400 * 10**9
SECOND_NS = 10**9
#: 2022-01-08 14:00 UTC: the first day's first quote.
OPEN_NS = 19_000 * DAY_NS + 14 * 3_600 * SECOND_NS
SYMBOLS = ("AAA", "BBB")
QUOTES_HEADER = "ts_event,symbol,bid_px,ask_px,bid_sz,ask_sz\n"
TRADES_HEADER = "ts_event,symbol,price,size,side\n"


def _quotes(days: range) -> str:
    """A quote a minute, twelve a day, of each symbol."""
    lines = [
        f"{OPEN_NS + d * DAY_NS + i * 60 * SECOND_NS + k},{symbol},"
        f"{mid - 0.05:.2f},{mid + 0.05:.2f},{3 + i % 4},{5 + i % 3}\n"
        for d in days
        for i in range(12)
        for k, symbol in enumerate(SYMBOLS)
        for mid in [50 + d + 0.1 * i + k]
    ]
    return QUOTES_HEADER + "".join(lines)


def _trades(days: range) -> str:
    """A trade every other minute, 0.3 s before a quote: within the quote's 1 s window of
    the default spec's trade features (``signed_volume_1s``, ``trade_count_1s``)."""
    lines = [
        f"{OPEN_NS + d * DAY_NS + i * 120 * SECOND_NS - 300_000_000 + k},{symbol},"
        f"{50 + d + 0.2 * i + k:.2f},{10 + i},{1 if i % 2 else -1}\n"
        for d in days
        for i in range(6)
        for k, symbol in enumerate(SYMBOLS)
    ]
    return TRADES_HEADER + "".join(lines)


@pytest.fixture
def work() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="tt-appended-kinds-") as tmp:
        folder = Path(tmp)
        (folder / "quotes-history.csv").write_text(_quotes(range(5)))
        (folder / "trades-history.csv").write_text(_trades(range(5)))
        (folder / "quotes-day.csv").write_text(_quotes(range(5, 6)))
        (folder / "trades-day.csv").write_text(_trades(range(5, 6)))
        yield folder


def _ingest(
    work: Path, names: list[str], store: Path, partition: str, replace: bool, workers: int = 1
) -> IngestResult:
    options = IngestOptions(format="csv", partition=partition, replace=replace, workers=workers)  # type: ignore[arg-type]
    return ingest([str(work / n) for n in names], str(store), options, progress=False)


HISTORY = ["quotes-history.csv", "trades-history.csv"]
APPENDS = {
    "quotes": [["quotes-day.csv"]],
    "trades": [["trades-day.csv"]],
    "trades-then-quotes": [["trades-day.csv"], ["quotes-day.csv"]],
}


@pytest.mark.parametrize("appends", sorted(APPENDS))
@pytest.mark.parametrize("partition", ["all", "month", "day"])
def test_a_day_of_one_kind_appends_as_if_ingested_at_once(
    work: Path, partition: str, appends: str
) -> None:
    # A partition of many days computes its features over all its days again; without the
    # stored trades, the quotes appended alone gave every quote no trades: refused ("its
    # features differ") or, with replace, stored so. A day's trades, then its quotes,
    # each in a job of its own, stored the quotes' features without the trades.
    appended, at_once = work / "appended", work / "at-once"
    _ingest(work, HISTORY, appended, partition, replace=False)
    jobs = APPENDS[appends]
    results = [_ingest(work, names, appended, partition, replace=False) for names in jobs]
    everything = HISTORY + [n for names in jobs for n in names]
    whole = _ingest(work, everything, at_once, partition, replace=False)
    assert_same_latest(appended, at_once)
    # "events stored, no features (the quotes clock needs quotes events)" only of a
    # session without quotes (a day of trades alone), as for one ingest of all the files.
    assert set(results[-1].notes) <= set(whole.notes)


def test_blocks_of_a_symbol_read_their_own_stored_rows(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sessions cut into blocks of about a symbol each, on two threads: each block reads
    # the stored trades of its own symbols.
    monkeypatch.setattr(_job, "BLOCK_ROWS", 30)
    monkeypatch.setattr(_job, "INLINE_ROWS", -1)
    appended, at_once = work / "appended", work / "at-once"
    for names in (HISTORY, ["quotes-day.csv"]):
        assert _ingest(work, names, appended, "all", False, workers=2).published
    _ingest(work, [*HISTORY, "quotes-day.csv"], at_once, "all", False, workers=2)
    assert_same_latest(appended, at_once)


@pytest.mark.parametrize("partition", ["all", "month", "day"])
def test_trades_that_change_stored_quotes_features_need_replace(work: Path, partition: str) -> None:
    # The day's quotes were stored without its trades: its trades change the features of
    # stored rows, as a day of events before stored ones does: refused, or with replace
    # stored as one ingest of all the files writes it (on a day partition, the trades
    # were stored and the quotes' features silently kept as they were).
    appended, at_once = work / "appended", work / "at-once"
    _ingest(work, [*HISTORY, "quotes-day.csv"], appended, partition, replace=False)
    with pytest.raises(VersionConflictError, match="its features differ"):
        _ingest(work, ["trades-day.csv"], appended, partition, replace=False)
    _ingest(work, ["trades-day.csv"], appended, partition, replace=True)
    _ingest(work, [*HISTORY, "quotes-day.csv", "trades-day.csv"], at_once, partition, False)
    assert_same_latest(appended, at_once)


@pytest.mark.parametrize("partition", ["all", "day"])
def test_replace_with_one_kind_keeps_the_other_kinds_part_in_the_features(
    work: Path, partition: str
) -> None:
    appended, at_once = work / "appended", work / "at-once"
    _ingest(work, HISTORY, appended, partition, replace=False)
    _ingest(work, ["quotes-day.csv"], appended, partition, replace=True)
    _ingest(work, [*HISTORY, "quotes-day.csv"], at_once, partition, replace=False)
    assert_same_latest(appended, at_once)


@pytest.mark.parametrize("partition", ["all", "day"])
def test_a_rerun_of_one_kinds_file_writes_nothing(work: Path, partition: str) -> None:
    store = work / "store"
    first = _ingest(work, HISTORY, store, partition, replace=False)
    for name in HISTORY:
        rerun = _ingest(work, [name], store, partition, replace=False)
        assert not rerun.published
        assert rerun.version.version == first.version.version


def test_a_changed_day_of_one_kind_is_still_refused(work: Path) -> None:
    # The other kind's stored rows are read for the features, not taken as the job's: a
    # day of quotes other than the stored one conflicts as before.
    store = work / "store"
    _ingest(work, HISTORY, store, "all", replace=False)
    (work / "quotes-changed.csv").write_text(_quotes(range(4, 5)).replace(",3,", ",4,"))
    with pytest.raises(VersionConflictError, match="its quotes events and features differ"):
        _ingest(work, ["quotes-changed.csv"], store, "all", replace=False)
