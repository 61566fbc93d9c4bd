"""The reliability report: every check on a fixed budget, and the table of figures.

``run_report(quick=True)`` runs the fuzz targets (each in its own process), the
injected faults (SIGKILL during an ingest at 20+ points, a full disk, I/O errors,
altered and missing files), the named hostile-store cases (each in its own process
under a memory cap), the concurrency races and the loader soaks, then
:func:`format_report` prints inputs fuzzed, faults injected, each hostile case by name,
rows in / stored / quarantined, rows lost and leaks found. The run passes when
findings, failed faults, failed hostile cases, rows lost and leaks are all 0.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._seeds import default_data_dir
from .concurrency import readers_during_commits, two_writers
from .faults import (
    FaultOutcome,
    damaged_files,
    disk_full,
    disk_full_tmpfs,
    reference_rows,
    sigkill_during_ingest,
)
from .hostile import hostile_stores
from .soak import make_soak_store, soak
from .targets import make_targets
from .workload import Workload

__all__ = ["Budget", "ReliabilityReport", "format_report", "run_report"]


@dataclass(frozen=True)
class Budget:
    """How much of each check a run does. ``quick`` fits in 10 minutes on 2 cores."""

    fuzz_s: float
    kill_points: int
    disk_points: int
    commits: int
    writer_rounds: int
    soak_epochs: int
    soak_zstd_epochs: int

    @classmethod
    def of(cls, quick: bool) -> Budget:
        if quick:
            return cls(6.0, 20, 10, 10, 5, 200, 50)
        return cls(60.0, 60, 30, 40, 20, 1000, 200)


@dataclass
class ReliabilityReport:
    """Figures of one run; ``passed`` when nothing was found, lost or leaked."""

    quick: bool
    seed: int
    fuzz: list[dict[str, Any]] = field(default_factory=list)
    faults: list[FaultOutcome] = field(default_factory=list)
    hostile: list[FaultOutcome] = field(default_factory=list)
    rows_in: int = 0
    rows_stored: int = 0
    rows_quarantined: int = 0
    rows_lost: int = 0
    concurrency: dict[str, Any] = field(default_factory=dict)
    soaks: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def inputs_fuzzed(self) -> int:
        return sum(int(f["inputs"]) for f in self.fuzz)

    @property
    def findings(self) -> int:
        return sum(int(f["n_findings"]) for f in self.fuzz)

    @property
    def faults_failed(self) -> int:
        return sum(not o.ok for o in self.faults)

    @property
    def hostile_failed(self) -> int:
        """Hostile-store cases (by name) with at least one point whose promise broke."""
        return len({o.fault for o in self.hostile if not o.ok})

    @property
    def leaks(self) -> int:
        return sum(len(s["leaks"]) for s in self.soaks)

    @property
    def passed(self) -> bool:
        errors = len(self.concurrency.get("errors", []))
        broken = self.findings or self.faults_failed or self.hostile_failed or self.rows_lost
        return not (broken or self.leaks or errors)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["faults"] = [asdict(o) for o in self.faults]
        doc["hostile"] = [asdict(o) for o in self.hostile]
        doc |= {
            "inputs_fuzzed": self.inputs_fuzzed,
            "findings": self.findings,
            "faults_injected": len(self.faults),
            "faults_failed": self.faults_failed,
            "hostile_failed": self.hostile_failed,
            "leaks": self.leaks,
            "passed": self.passed,
        }
        return doc


def _timed(report: ReliabilityReport, phase: str, fn: Callable[[], None]) -> None:
    t0 = time.perf_counter()
    fn()
    report.seconds[phase] = time.perf_counter() - t0


def fuzz_in_children(
    names: list[str], seconds: float, seed: int, data: Path | None, save: Path
) -> list[dict[str, Any]]:
    """Fuzz ``names`` in child processes; a child that dies is a finding of its target."""
    out: list[dict[str, Any]] = []
    todo = list(names)
    while todo:
        cmd = [sys.executable, "-m", "ticktensor.reliability._fuzzchild", str(seconds)]
        cmd += [str(seed), str(data or ""), str(save), *todo]
        limit = (seconds + 30) * len(todo) + 120
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, check=False)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        out += [json.loads(ln) for ln in lines]
        todo = todo[len(lines) :]
        if todo and done.returncode == 0:
            raise RuntimeError(f"fuzz child ended early: {done.stderr[-500:]}")
        if todo:  # the child died inside the first unreported target
            why = f"fuzz child died (exit {done.returncode}): {done.stderr.strip()[-300:]}"
            out.append({"target": todo[0], "inputs": 1, "accepted": 0, "rejected": 0,
                        "seconds": seconds, "errors": {}, "findings": [{"error": why}],
                        "n_findings": 1})  # fmt: skip
            todo = todo[1:]
    return out


def run_report(
    *,
    quick: bool = True,
    seed: int = 0,
    data_dir: Path | None = None,
    work_dir: Path | None = None,
    log: Callable[[str], None] = lambda _line: None,
) -> ReliabilityReport:
    """Run every check on the budget of ``quick`` (or the long one) and collect figures."""
    budget = Budget.of(quick)
    data = data_dir or default_data_dir()
    root = work_dir or Path(tempfile.mkdtemp(prefix="ticktensor-reliability-"))
    report = ReliabilityReport(quick=quick, seed=seed)

    def fuzz_phase() -> None:
        names = [t.name for t in make_targets(data)]
        report.fuzz = fuzz_in_children(names, budget.fuzz_s, seed, data, root / "findings")
        for res in report.fuzz:
            log(f"fuzz {res['target']}: {res['inputs']:,} inputs, {res['n_findings']} findings")

    def fault_phase() -> None:
        work = Workload.create(root / "workload")
        ref = reference_rows(work)
        outcomes = sigkill_during_ingest(work, budget.kill_points, seed, ref)
        log(f"faults sigkill: {len(outcomes)} points, {sum(not o.ok for o in outcomes)} failed")
        outcomes += disk_full(work, budget.disk_points, ref)
        outcomes += disk_full_tmpfs(work, max(budget.disk_points // 2, 2), ref)
        outcomes += damaged_files(work)
        report.faults = outcomes
        reruns = sum(o.fault in ("sigkill", "disk-full") and o.ok for o in outcomes) + 1
        report.rows_in = ref.rows_read * reruns
        report.rows_stored = ref.rows_stored * reruns
        report.rows_quarantined = ref.rows_quarantined * reruns
        report.rows_lost = sum(o.rows_lost for o in outcomes)
        log(f"faults: {len(outcomes)} injected, {report.faults_failed} failed")

    def hostile_phase() -> None:
        report.hostile = hostile_stores(root / "hostile")
        for name in dict.fromkeys(o.fault for o in report.hostile):
            held = all(o.ok for o in report.hostile if o.fault == name)
            log(f"hostile {name}: {'held' if held else 'FAILED'}")

    def concurrency_phase() -> None:
        readers = readers_during_commits(str(root / "conc-readers"), budget.commits)
        threads = two_writers(
            str(root / "conc-threads"), processes=False, rounds=budget.writer_rounds
        )
        procs = two_writers(str(root / "conc-procs"), processes=True, rounds=2)
        report.concurrency = {
            "reads": readers.reads,
            "versions_seen": len(readers.versions_seen),
            "commits": readers.commits + threads.commits + procs.commits,
            "conflicts": threads.conflicts + procs.conflicts,
            "errors": readers.errors + threads.errors + procs.errors,
        }
        log(f"concurrency: {report.concurrency}")

    def soak_phase() -> None:
        from ticktensor.loaders import FastOptions

        for codec, epochs, kwargs in (
            ("none", budget.soak_epochs, {}),
            ("zstd", budget.soak_zstd_epochs, {"fast": FastOptions(prefetch=2)}),
        ):
            url = make_soak_store(str(root / f"soak-{codec}"), codec)
            r = soak(url, epochs, label=f"{codec}{' + prefetch' if kwargs else ''}",
                     loader_kwargs=kwargs)  # fmt: skip
            report.soaks.append(
                {
                    "label": r.label,
                    "epochs": r.epochs,
                    "batches": r.batches,
                    "seconds": r.seconds,
                    "rss_start_mib": r.rss[0] / 2**20,
                    "rss_end_mib": r.rss[-1] / 2**20,
                    "rss_slope_kib_per_epoch": r.rss_slope_kib,
                    "thread_slope": r.thread_slope,
                    "fd_slope": r.fd_slope,
                    "threads": [r.threads[0], r.threads[-1]],
                    "fds": [r.fds[0], r.fds[-1]],
                    "leaks": r.leaks,
                }
            )
            log(f"soak {r.label}: {r.epochs} epochs, leaks {r.leaks}")

    try:
        for phase, fn in (
            ("fuzz", fuzz_phase),
            ("faults", fault_phase),
            ("hostile", hostile_phase),
            ("concurrency", concurrency_phase),
            ("soak", soak_phase),
        ):
            _timed(report, phase, fn)
    finally:
        if work_dir is None:
            _clear_scratch(root)
    return report


def _clear_scratch(root: Path) -> None:
    """Remove a run's own scratch folder (stores, a 100 MB pointer), except the inputs of
    fuzz findings saved for replay in ``findings/``."""
    for entry in root.iterdir():
        if entry.name == "findings":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: findings were saved
        root.rmdir()


def format_report(r: ReliabilityReport) -> str:
    """The report as a text table."""
    lines = [f"ticktensor reliability ({'quick' if r.quick else 'full'}, seed {r.seed})", ""]
    lines.append(
        f"{'fuzz target':<20}{'inputs':>10}{'accepted':>10}{'rejected':>10}{'findings':>10}"
    )
    lines += [
        f"{f['target']:<20}{f['inputs']:>10,}{f['accepted']:>10,}{f['rejected']:>10,}"
        f"{f['n_findings']:>10}"
        for f in r.fuzz
    ]
    lines += ["", f"{'fault':<16}{'injected':>10}{'held':>8}{'rows lost':>11}  example"]
    for kind, items, example in _by_fault(r.faults):
        lines.append(
            f"{kind:<16}{len(items):>10}{sum(o.ok for o in items):>8}"
            f"{sum(o.rows_lost for o in items):>11}  {example.point}: {example.detail[:70]}"
        )
    lines += ["", f"{'hostile store case':<24}{'points':>7}{'held':>6}  example"]
    cases = list(_by_fault(r.hostile))
    for name, items, example in cases:
        lines.append(
            f"{name:<24}{len(items):>7}{sum(o.ok for o in items):>6}  "
            f"{example.point}: {example.detail[:80]}"
        )
    c = r.concurrency
    lines += [
        "",
        f"concurrency: {c.get('reads', 0)} verified reads of {c.get('versions_seen', 0)} versions "
        f"during commits; {c.get('commits', 0)} commits, {c.get('conflicts', 0)} version "
        f"conflicts retried; errors {len(c.get('errors', []))}",
        "",
        f"{'soak':<18}{'epochs':>7}{'batches':>10}{'RSS MiB':>14}{'KiB/epoch':>11}"
        f"{'threads':>9}{'fds':>8}",
    ]
    for s in r.soaks:
        lines.append(
            f"{s['label']:<18}{s['epochs']:>7}{s['batches']:>10,}"
            f"{s['rss_start_mib']:>7.0f}->{s['rss_end_mib']:<5.0f}{s['rss_slope_kib_per_epoch']:>11.1f}"
            f"{s['threads'][0]:>5}->{s['threads'][1]:<3}{s['fds'][0]:>4}->{s['fds'][1]:<3}"
        )
    lines += [
        "",
        f"inputs fuzzed        {r.inputs_fuzzed:>12,}   findings {r.findings}",
        f"faults injected      {len(r.faults):>12,}   failed {r.faults_failed}",
        f"hostile store cases  {len(cases):>12,}   failed {r.hostile_failed}",
        f"rows in              {r.rows_in:>12,}",
        f"rows stored          {r.rows_stored:>12,}",
        f"rows quarantined     {r.rows_quarantined:>12,}",
        f"rows lost            {r.rows_lost:>12,}   (must be 0)",
        f"leaks found          {r.leaks:>12,}   (must be 0)",
        "time                 " + ", ".join(f"{k} {v:.0f} s" for k, v in r.seconds.items()),
        f"result               {'PASS' if r.passed else 'FAIL'}",
    ]
    return "\n".join(lines)


def _by_fault(
    outcomes: Iterable[FaultOutcome],
) -> Iterator[tuple[str, list[FaultOutcome], FaultOutcome]]:
    """Outcomes grouped by fault (or case) name, in first-seen order, each group with the
    outcome it shows: its first failure, else its first."""
    groups: dict[str, list[FaultOutcome]] = {}
    for o in outcomes:
        groups.setdefault(o.fault, []).append(o)
    for name, items in groups.items():
        yield name, items, next((o for o in items if not o.ok), items[0])
