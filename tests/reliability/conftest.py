"""Shared fixtures of the reliability tests: the real data folder and the fuzz targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from ticktensor.reliability.targets import FuzzTarget, make_targets

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@pytest.fixture(scope="session")
def targets() -> dict[str, FuzzTarget]:
    """Every fuzz target, seeded from ``../shared/data`` when it is there."""
    return {t.name: t for t in make_targets(DATA if DATA.is_dir() else None)}
