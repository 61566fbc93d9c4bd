"""The named hostile-store cases of the reliability report, each run once as the report runs it.

A case builds pack stores through the public API, damages them and checks the promise
from the outside, in its own process under a memory cap; it holds when every point of it
did. A case whose fix has not landed is a strict xfail with the reason: the suite goes
red when the fix lands, which says to remove the mark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ticktensor.reliability.faults import FaultOutcome
from ticktensor.reliability.hostile import CASES, run_case
from ticktensor.reliability.report import ReliabilityReport, format_report

PENDING = {
    "repair-symlinked-area": "verify --repair follows a staging/, events/ or packs/ symlinked "
    "to a folder elsewhere and removes the files there",
    "silent-chunk-damage": "the default loader (verify=False) serves other values from a zstd "
    "chunk with a flipped byte (written without the frame checksum) and from a shard whose "
    "index entries were swapped",
    "pack-symbol-list": "a pack's symbol list is not checked when read: out of order, "
    "duplicated, empty or null names pass verify and the loader",
    "huge-pointer": "latest.json is parsed whole before it is validated: a 100 MB pointer "
    "ends in MemoryError under a memory cap",
    "write-through-symlink": "a commit creates the target of a dangling .lock symlink and "
    "writes its log entry through a versions/ folder symlinked elsewhere",
    "checkpoint-disagrees": "a checkpoint that drops a pack its log entries added is used "
    "silently, and verify says OK",
    "shard-truncated-mapped": "a shard truncated while an epoch has it mapped kills the "
    "reader with SIGBUS",
}


def test_every_finding_is_a_named_case() -> None:
    assert sorted(CASES) == sorted(PENDING)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=PENDING[n]))
        if n in PENDING
        else n
        for n in CASES
    ],
)
def test_hostile_case_holds(name: str, tmp_path: Path) -> None:
    outcomes = run_case(name, tmp_path, timeout_s=240.0)
    assert outcomes, f"{name} reported no point"
    assert {o.fault for o in outcomes} == {name}
    assert [f"{o.point}: {o.detail}" for o in outcomes if not o.ok] == []


def test_the_report_lists_each_case_by_name_and_fails_on_one() -> None:
    report = ReliabilityReport(quick=True, seed=0)
    report.hostile = [
        FaultOutcome("huge-pointer", "ticktensor verify", False, "2.1 s: MemoryError"),
        FaultOutcome("huge-pointer", "Store.open().version()", True, "refused"),
        FaultOutcome("write-through-symlink", ".lock dangling symlink", True, "refused"),
    ]
    text = format_report(report)
    assert "huge-pointer                  2     1  ticktensor verify: 2.1 s: MemoryError" in text
    assert "write-through-symlink         1     1" in text
    assert "hostile store cases             2   failed 1" in text
    assert text.endswith("FAIL")
    assert report.to_dict()["hostile_failed"] == 1
    report.hostile = report.hostile[1:]
    assert report.passed
