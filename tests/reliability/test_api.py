"""The reliability package's public API: sorted, complete ``__all__``; the CLI is wired."""

from __future__ import annotations

import pytest

import ticktensor.reliability as rel
from ticktensor.cli import build_parser


def test_all_is_sorted_and_complete() -> None:
    exported = list(rel.__all__)
    order = sorted(exported, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))
    assert exported == order
    assert [n for n in exported if not hasattr(rel, n)] == []


def test_cli_has_reliability_and_verify_repair(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["reliability", "--quick", "--seed", "3"])
    assert args.quick
    assert args.seed == 3
    args = parser.parse_args(["verify", "s", "--repair", "--grace", "0", "--dry-run"])
    assert args.repair
    assert args.grace == 0
    assert args.dry_run


def test_report_table_and_verdict() -> None:
    report = rel.ReliabilityReport(quick=True, seed=0)
    report.fuzz = [
        {"target": "csv", "inputs": 10, "accepted": 7, "rejected": 3, "n_findings": 0},
    ]
    report.faults = [rel.FaultOutcome("sigkill", "step 1 of 9", True)]
    report.rows_in, report.rows_stored, report.rows_quarantined = 10, 8, 2
    report.concurrency = {"reads": 4, "versions_seen": 2, "commits": 3, "conflicts": 1}
    report.soaks = [
        {"label": "none", "epochs": 2, "batches": 9, "rss_start_mib": 1.0, "rss_end_mib": 1.0,
         "rss_slope_kib_per_epoch": 0.0, "threads": [3, 3], "fds": [5, 5], "leaks": []},
    ]  # fmt: skip
    text = rel.format_report(report)
    assert "inputs fuzzed                  10" in text
    assert "rows lost                       0" in text
    assert text.endswith("PASS")
    report.rows_lost = 1
    assert not report.passed
    assert rel.format_report(report).endswith("FAIL")


def test_fuzz_child_prints_json(capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    import json

    from ticktensor.reliability._fuzzchild import main

    assert main(["0.3", "1", "", str(tmp_path), "manifest"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == "manifest"
    assert doc["inputs"] > 0
    assert doc["n_findings"] == 0
