"""The fault-injection workload: small vendor files for two days, and a store with day one.

Day one is published as version 1; the faults hit the conversion of day two. The files
are trades CSVs of two symbols with a few bad rows, so the quarantine is exercised too.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ticktensor.ingest import IngestOptions, IngestResult, ingest
from ticktensor.store import Layout, Store

__all__ = ["Workload", "write_day"]

_DAY0_NS = 1_704_186_000 * 10**9  # 2024-01-02 09:00 UTC
_DAY_NS = 86_400 * 10**9


def write_day(folder: Path, day: int, rows: int = 4000, seed: int = 0) -> list[Path]:
    """One trades CSV per symbol for ``day``; three rows per file break a rule."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for k, symbol in enumerate(("AAA", "BBB")):
        rng = np.random.default_rng([seed, day, k])
        ts = _DAY0_NS + day * _DAY_NS + np.cumsum(rng.integers(10**6, 10**8, rows))
        price = np.round(50 + k * 20 + np.cumsum(rng.normal(0, 0.02, rows)), 3)
        size = rng.integers(1, 900, rows)
        lines = ["ts_event,symbol,price,size,side"]
        for i, (t, p, s) in enumerate(zip(ts.tolist(), price.tolist(), size.tolist(), strict=True)):
            px = -p if i in (17, 1001) else p  # rule: positive_price
            lines.append(f"{t},{symbol},{px},{s},{'BS'[i % 2]}")
        lines.insert(500, "not,a,valid,row")  # unparseable
        path = folder / f"trades-{symbol}-day{day}.csv"
        path.write_text("\n".join(lines) + "\n")
        out.append(path)
    return out


@dataclass
class Workload:
    """Input files of two days under ``root``, and a store at ``root/store`` holding day one."""

    root: Path
    day1: list[Path]
    day2: list[Path]

    @classmethod
    def create(cls, root: Path, rows: int = 4000, codec: str = "zstd") -> Workload:
        root.mkdir(parents=True, exist_ok=True)
        work = cls(root, write_day(root / "in1", 0, rows), write_day(root / "in2", 1, rows))
        store = root / "base"
        if not store.exists():
            Store.create(str(store), layout=Layout(codec=codec, chunk_rows=64))  # type: ignore[arg-type]
            work.ingest(str(store), work.day1)
        return work

    @staticmethod
    def options() -> IngestOptions:
        return IngestOptions(workers=1)

    @staticmethod
    def ingest(store: str, files: list[Path]) -> IngestResult:
        """The conversion under test (in this process, one worker)."""
        return ingest([str(f) for f in files], store, Workload.options(), progress=False)

    def fresh_store(self, name: str) -> Path:
        """A copy of the day-one store (version 1) to break."""
        target = self.root / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(self.root / "base", target)
        return target
