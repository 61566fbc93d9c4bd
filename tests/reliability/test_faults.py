"""Injected faults: SIGKILL mid-ingest, a full disk, I/O errors, altered and missing files.

For each: the previous version stays readable and verifies, the error names the file or
chunk, ``repair`` removes the debris (and nothing published), and a rerun publishes
exactly what a clean run does (rows lost = 0).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ticktensor.cli import main
from ticktensor.errors import StoreCorruptError
from ticktensor.reliability.faults import (
    damaged_files,
    disk_full,
    disk_full_tmpfs,
    reference_rows,
    sigkill_during_ingest,
)
from ticktensor.reliability.workload import Workload
from ticktensor.store import Location, Store
from ticktensor.store._repair import find_orphans
from ticktensor.store.testing import write_segment


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Workload:
    return Workload.create(tmp_path_factory.mktemp("faults"), rows=2000)


def _failed(outcomes: list) -> list:  # type: ignore[type-arg]
    return [o for o in outcomes if not o.ok]


@pytest.mark.slow
def test_sigkill_at_spread_points_loses_nothing(work: Workload) -> None:
    outcomes = sigkill_during_ingest(work, points=8, seed=3)
    assert len(outcomes) >= 7
    assert _failed(outcomes) == []
    assert sum(o.rows_lost for o in outcomes) == 0


def test_disk_full_at_spread_points_loses_nothing(work: Workload) -> None:
    outcomes = disk_full(work, points=6, ref=reference_rows(work))
    assert len(outcomes) == 6
    assert _failed(outcomes) == []
    assert all("No space left on device" in o.detail for o in outcomes)


@pytest.mark.slow
def test_a_real_full_disk_loses_nothing(work: Workload) -> None:
    outcomes = disk_full_tmpfs(work, points=4, ref=reference_rows(work))
    if not outcomes:
        pytest.skip("mounting a small tmpfs is not permitted here")
    assert _failed(outcomes) == []
    assert all("No space left on device" in o.detail for o in outcomes)


def test_damaged_files_are_named(work: Workload) -> None:
    outcomes = damaged_files(work)
    assert {o.fault for o in outcomes} >= {"altered-chunk", "io-error", "missing-file"}
    assert {o.point for o in outcomes} >= {"read_pack(verify=True)", "pack group"}  # packs
    assert _failed(outcomes) == []


def _store_with_debris(tmp_path: Path) -> tuple[Store, list[str]]:
    store = Store.create(str(tmp_path / "s"))
    ts = np.arange(10, dtype=np.int64)
    pack = store.write_pack(
        session="d1",
        symbols=["A"],
        offsets=[0, 10],
        ts=ts,
        values=np.ones((10, 2), np.float32),
        feature_names="ab",
    )
    store.commit(packs=[pack])
    lost = store.write_pack(  # written, never committed: a killed job's pack
        session="d2",
        symbols=["A"],
        offsets=[0, 10],
        ts=ts,
        values=np.zeros((10, 2), np.float32),
        feature_names="ab",
    )
    root = tmp_path / "s"
    (root / "versions" / "00000002.json").write_text("{torn")  # unpublished manifest
    (root / "latest.json.tmp-0123").write_text("{}")
    (root / "staging" / "job" / "parts").mkdir(parents=True)
    (root / "staging" / "job" / "parts" / "p.arrow").write_bytes(b"x")
    debris = [f"{lost.path}/{name}" for name in lost.files]
    debris += ["versions/00000002.json", "latest.json.tmp-0123", "staging/job/parts/p.arrow"]
    return store, sorted(debris)


def test_repair_removes_orphans_and_nothing_published(tmp_path: Path) -> None:
    store, debris = _store_with_debris(tmp_path)
    before = [store.location.read_bytes(f"versions/{v:08d}.json") for v in (0, 1)]
    young = store.repair()  # default grace: a running job's files are kept
    assert young.removed == []
    assert sorted(young.too_young) == debris
    dry = store.repair(grace_s=0, dry_run=True)
    assert sorted(rel for rel, _ in dry.removed) == debris
    assert find_orphans(store.location, store.versions())[0] == debris
    done = store.repair(grace_s=0)
    assert sorted(rel for rel, _ in done.removed) == debris
    assert find_orphans(store.location, store.versions())[0] == []
    assert [store.location.read_bytes(f"versions/{v:08d}.json") for v in (0, 1)] == before
    store.verify(0)
    store.verify(1)
    assert not (tmp_path / "s" / "staging" / "job").exists()


def test_cli_verify_repair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, debris = _store_with_debris(tmp_path)
    assert main(["verify", store.url, "--repair", "--quiet", "--dry-run", "--grace", "0"]) == 0
    assert f"would remove {len(debris)} orphaned file(s)" in capsys.readouterr().out
    assert main(["verify", store.url, "--repair", "--quiet"]) == 0
    assert "younger than 3600 s" in capsys.readouterr().out
    assert main(["verify", store.url, "--repair", "--quiet", "--grace", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK: version 1")
    assert f"removed {len(debris)} orphaned file(s)" in out
    assert find_orphans(store.location, store.versions())[0] == []


def test_commit_refuses_a_record_whose_file_is_missing(tmp_path: Path) -> None:
    store = Store.create(str(tmp_path / "s"))
    seg = write_segment(
        store,
        symbol="A",
        session="d",
        ts=np.arange(5, dtype=np.int64),
        values=np.ones((5, 1), np.float32),
        feature_names=["x"],
    )
    os.unlink(tmp_path / "s" / seg.path / "values" / "c" / "0" / "0")
    with pytest.raises(StoreCorruptError, match=r"values/c/0/0: file of a record"):
        store.commit(segments=[seg])
    assert store.latest_version() == 0


def test_a_failed_streamed_write_leaves_no_partial_object() -> None:
    location = Location("memory://tt-reliability-partial")

    def interrupted() -> None:
        with location.open_atomic("a/b.bin") as f:
            f.write(b"half")
            raise OSError("boom")

    with pytest.raises(OSError, match="boom"):
        interrupted()
    assert not location.exists("a/b.bin")


_TABLE_UNDER_FSIZE_0 = """
import resource, signal, sys
import pyarrow as pa
from ticktensor.store import Store
store = Store.open(sys.argv[1])
table = pa.table({"ts_event": pa.array([1, 2], pa.timestamp("ns", "UTC")), "price": [1.0, 2.0]})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    store.write_table(kind="trades", symbol="A", session="d", table=table)
except OSError as exc:
    print(f"{type(exc).__name__}: {exc}")
"""


def test_a_table_write_failing_at_its_first_byte_names_the_file(tmp_path: Path) -> None:
    # The report's tmpfs-full fault: a disk that fills up as a session's event table is
    # opened. Every write of the child fails (RLIMIT_FSIZE 0), the table header first.
    Store.create(str(tmp_path / "s"))
    done = subprocess.run(
        [sys.executable, "-c", _TABLE_UNDER_FSIZE_0, str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "File too large" in done.stdout, done.stdout + done.stderr
    assert str(tmp_path / "s" / "events") in done.stdout, done.stdout
