"""Shared fixtures of the reliability tests: the real data folder, the fuzz targets and a
small store of format-1 segments."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ticktensor.reliability.targets import FuzzTarget, make_targets
from ticktensor.store import Codec, Layout, Store
from ticktensor.store.testing import write_segment

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@pytest.fixture(scope="session")
def targets() -> dict[str, FuzzTarget]:
    """Every fuzz target, seeded from ``../shared/data`` when it is there."""
    return {t.name: t for t in make_targets(DATA if DATA.is_dir() else None)}


def segment_store(root: Path, codec: str, symbols: int = 2, rows: int = 3000) -> Path:
    """A store at ``root`` of one session of ``symbols`` symbols (8 features, 1 label) in
    ``codec``, one legacy format-1 segment per symbol: the tests of segment paths, files
    and chunk files damage it."""
    store = Store.create(str(root), layout=Layout(codec=Codec(codec), chunk_rows=1024))
    rng = np.random.default_rng(0)
    ts = 1_704_186_000 * 10**9 + np.arange(rows, dtype=np.int64) * 10**6
    segments = [
        write_segment(
            store,
            symbol=f"S{k}",
            session="2024-01-02",
            ts=ts,
            values=rng.standard_normal((rows, 8)).astype(np.float32),
            feature_names=[f"f{i}" for i in range(8)],
            labels=rng.standard_normal((rows, 1)).astype(np.float32),
            label_names=["y"],
        )
        for k in range(symbols)
    ]
    store.commit(segments=segments, message="segments")
    return root
