"""Staging: parts kept in memory up to a budget, the rest on disk."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pytest

from ticktensor.ingest._staging import Staging
from ticktensor.schemas import EventKind
from ticktensor.store import Location


def _part(rows: int) -> pa.Table:
    return pa.table({"ts_event": pa.array(range(rows), pa.int64()), "x": pa.nulls(rows)})


def test_parts_within_budget_stay_in_memory_and_the_rest_go_to_disk(tmp_path: Path) -> None:
    part = _part(100)
    staging = Staging(Location(str(tmp_path)), "job", memory_bytes=part.column(0).nbytes)
    first = staging.write_part(EventKind.TRADES, "2024-01-02", "00000-00000", part)
    second = staging.write_part(EventKind.TRADES, "2024-01-02", "00000-00001", part)
    on_disk = [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.arrow")]
    assert on_disk == [second]
    # Both read back alike: all-null columns left out, rows in order.
    both = staging.read([first, second])
    assert both.column_names == ["ts_event"]
    assert both.column("ts_event").to_pylist() == list(range(100)) * 2
    staging.remove()
    assert not list(tmp_path.rglob("*.arrow"))
    with pytest.raises(FileNotFoundError):  # nothing is held once the job is done
        staging.read([first])


def test_only_a_staging_area_on_disk_is_picklable(tmp_path: Path) -> None:
    on_disk = pickle.loads(pickle.dumps(Staging(Location(str(tmp_path)), "job")))
    assert on_disk.job_id == "job"
    with pytest.raises(TypeError, match="in memory"):
        pickle.dumps(Staging(Location(str(tmp_path)), "job", memory_bytes=1 << 20))
