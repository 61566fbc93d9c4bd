"""A block that fails fails the job, on one thread or several, and leaves no working files."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from ticktensor.bench.ingest import generate
from ticktensor.ingest import IngestOptions, ingest
from ticktensor.ingest.readers import ReadOptions
from ticktensor.schemas import EventKind


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_block_fails_the_job_without_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    import ticktensor.ingest._assemble as assemble_module
    import ticktensor.ingest._job as job_module

    csv = tmp_path / "trades.csv"
    generate(csv, 20_000, 40, 1)
    monkeypatch.setattr(job_module, "BLOCK_ROWS", 1_000)  # about 20 blocks
    real = assemble_module.block_features
    calls = {"n": 0}
    lock = threading.Lock()

    def failing(*args: Any, **kwargs: Any) -> Any:
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n == 3:
            raise RuntimeError("block features failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(assemble_module, "block_features", failing)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            ingest(
                [str(csv)],
                str(tmp_path / "store"),
                IngestOptions(
                    format="csv", read=ReadOptions(kind=EventKind.TRADES), workers=workers
                ),
                progress=False,
            )
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "the job hangs after a block failed"
    assert len(errors) == 1
    assert "block features failed" in str(errors[0])
    store = tmp_path / "store"
    leftovers = [p for p in store.rglob("*") if ".writing" in p.name]
    assert leftovers == []
