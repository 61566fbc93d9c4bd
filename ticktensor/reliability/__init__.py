"""Reliability checks: fuzzed inputs, injected faults, concurrent readers and writers, soak.

One concept per module: :mod:`~ticktensor.reliability.targets` (what is fuzzed),
:mod:`~ticktensor.reliability.fuzz` (the seeded mutation engine),
:mod:`~ticktensor.reliability.faults` (SIGKILL, full disk, I/O errors, damaged files),
:mod:`~ticktensor.reliability.hostile` (named cases of hostile stores and failing disks),
:mod:`~ticktensor.reliability.concurrency` (readers during commits, racing writers),
:mod:`~ticktensor.reliability.soak` (loader epochs, RSS/threads/fds) and
:mod:`~ticktensor.reliability.report` (all of them on a budget, and the table). The test
suite runs small fixed budgets; ``ticktensor reliability [--quick]`` runs the report
(see ``docs/security.md``).
"""

from .concurrency import ConcurrencyResult, readers_during_commits, two_writers
from .faults import FaultOutcome, damaged_files, disk_full, sigkill_during_ingest
from .fuzz import Finding, FuzzResult, HangError, fuzz, mutate
from .hostile import CASES, HostileCase, hostile_stores
from .report import Budget, ReliabilityReport, format_report, run_report
from .soak import SoakResult, soak
from .targets import FuzzTarget, InvariantError, make_targets
from .workload import Workload

__all__ = [
    "CASES",
    "Budget",
    "ConcurrencyResult",
    "FaultOutcome",
    "Finding",
    "FuzzResult",
    "FuzzTarget",
    "HangError",
    "HostileCase",
    "InvariantError",
    "ReliabilityReport",
    "SoakResult",
    "Workload",
    "damaged_files",
    "disk_full",
    "format_report",
    "fuzz",
    "hostile_stores",
    "make_targets",
    "mutate",
    "readers_during_commits",
    "run_report",
    "sigkill_during_ingest",
    "soak",
    "two_writers",
]
