"""The plain C++ API, compiled without Python (examples/live_embed.cpp), gives the rows the
Python facade gives."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ticktensor.live import LiveEngine, batch_of_tables
from ticktensor.schemas import FeatureSpec

from .conftest import market

ROOT = Path(__file__).parents[2]
SPEC = FeatureSpec(
    ("mid", "spread_bps", "log_return", "volatility_20", "volume_1s", "vwap_distance_5",
     "time_of_day"),
    version=2,
)  # fmt: skip


def test_the_embedded_engine_gives_the_facades_rows(tmp_path: Path) -> None:
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    binary = tmp_path / "live_embed"
    subprocess.run(
        [compiler, "-std=c++17", "-O2", "-ffp-contract=off", f"-I{ROOT / 'native/include'}",
         str(ROOT / "examples/live_embed.cpp"), str(ROOT / "native/src/live_features.cpp"),
         "-o", str(binary)],
        check=True,
    )  # fmt: skip
    batch = batch_of_tables(market(("A", "B"), quotes=500, trades=150), "quotes")
    lines = []
    for k in range(len(batch)):
        v = batch.values[k]
        head = f"{'q' if batch.kind[k] == 0 else 't'} {batch.ts[k]} {batch.symbol[k]}"
        count = 4 if batch.kind[k] == 0 else 3
        lines.append(head + "".join(f" {x!r}" for x in v[:count].tolist()))
    out = subprocess.run(
        [str(binary)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
    ).stdout
    embedded = np.array([[float(x) for x in line.split()] for line in out.splitlines()])
    expected = LiveEngine(SPEC).push_batch(batch).values64
    np.testing.assert_array_equal(embedded, expected)
