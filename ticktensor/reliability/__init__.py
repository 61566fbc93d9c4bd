"""Reliability checks: fuzzed inputs, injected faults, concurrent readers and writers, soak.

Each concept is one module: :mod:`~ticktensor.reliability.targets` (what is fuzzed),
:mod:`~ticktensor.reliability.fuzz` (the seeded mutation engine). The test suite runs a
small fixed budget of each; ``ticktensor reliability`` runs longer ones and prints the
figures (see ``docs/security.md``).
"""

from .fuzz import Finding, FuzzResult, HangError, fuzz, mutate
from .targets import FuzzTarget, InvariantError, make_targets

__all__ = [
    "Finding",
    "FuzzResult",
    "FuzzTarget",
    "HangError",
    "InvariantError",
    "fuzz",
    "make_targets",
    "mutate",
]
