"""The named hostile-store cases of the reliability report, each run once as the report runs it.

A case builds pack stores through the public API, damages them and checks the promise
from the outside, in its own process under a memory cap; it holds when every point of it
did. A case whose fix has not landed is a strict xfail with the reason: the suite goes
red when the fix lands, which says to remove the mark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ticktensor.errors import ConfigError
from ticktensor.reliability.faults import FaultOutcome
from ticktensor.reliability.hostile import CASES, hostile_stores
from ticktensor.reliability.report import ReliabilityReport, format_report

#: One case per finding of the store's trust review, in its order.
FINDINGS = [
    "repair-symlinked-area",
    "silent-chunk-damage",
    "pack-symbol-list",
    "huge-pointer",
    "write-through-symlink",
    "checkpoint-disagrees",
    "shard-truncated-mapped",
]
#: Cases whose fix has not landed, with the reason (strict xfails); each fix has landed.
PENDING: dict[str, str] = {}


def test_every_finding_is_a_named_case() -> None:
    assert list(CASES) == FINDINGS


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=PENDING[n]))
        if n in PENDING
        else n
        for n in FINDINGS
    ],
)
def test_hostile_case_holds(name: str, tmp_path: Path) -> None:
    outcomes = hostile_stores(tmp_path, [name], timeout_s=240.0)
    assert outcomes, f"{name} reported no point"
    assert {o.fault for o in outcomes} == {name}
    assert [f"{o.point}: {o.detail}" for o in outcomes if not o.ok] == []


def test_a_case_that_kills_its_child_fails_and_the_next_case_runs(tmp_path: Path) -> None:
    # Nothing is built when the folder of a case is a file: the case raises, the child
    # exits 1, and the run goes on with the next case in a new child.
    (tmp_path / "huge-pointer").write_bytes(b"")
    outcomes = hostile_stores(tmp_path, ["huge-pointer", "write-through-symlink"])
    died = [o for o in outcomes if o.fault == "huge-pointer"]
    assert [(o.point, o.ok) for o in died] == [("after 0 point(s)", False)]
    assert died[0].detail.startswith("child exit 1: ")
    assert {o.fault for o in outcomes} == {"huge-pointer", "write-through-symlink"}


def test_an_unknown_case_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown hostile case"):
        hostile_stores(tmp_path, ["no-such-case"])


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
