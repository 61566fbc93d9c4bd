"""The Arrow IPC reader: file and stream formats, compressed, re-cut into batches."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import ArrowReader, CsvFormat, ReadOptions

TABLE = pa.table(
    {
        "time": pa.array(np.arange(1000) * 10**6, pa.timestamp("us", "Asia/Tokyo")),
        "px": np.arange(1000) + 0.25,
        "qty": np.ones(1000),
        "sym": ["A"] * 1000,
    }
)
FMT = CsvFormat(columns={"ts_event": "time", "price": "px", "size": "qty", "symbol": "sym"})


def _write(path: Path, stream: bool) -> None:
    sink = pa.ipc.new_stream if stream else pa.ipc.new_file
    with pa.OSFile(str(path), "wb") as f, sink(f, TABLE.schema) as writer:
        for batch in TABLE.to_batches(max_chunksize=300):
            writer.write_batch(batch)


@pytest.mark.parametrize(("name", "stream"), [("t.arrow", False), ("t.arrows", True)])
@pytest.mark.parametrize("gz", [False, True])
def test_file_and_stream_formats(tmp_path: Path, name: str, stream: bool, gz: bool) -> None:
    path = tmp_path / name
    _write(path, stream)
    if gz:
        packed = path.with_name(name + ".gz")
        packed.write_bytes(gzip.compress(path.read_bytes()))
        path = packed
    source = expand_inputs([str(path)])[0]
    batches = list(ArrowReader().read(source, ReadOptions(kind="trades", batch_rows=128, csv=FMT)))
    assert all(b.table.num_rows <= 128 for b in batches)
    table = pa.concat_tables([b.table for b in batches])
    assert np.concatenate([b.rows for b in batches]).tolist() == list(range(1, 1001))
    assert table.column("price").to_pylist() == TABLE.column("px").to_pylist()
    want = TABLE.column("time").cast(pa.timestamp("ns", "UTC")).cast(pa.int64())
    assert table.column("ts_event").cast(pa.int64()).equals(want)
    assert source.sha256 is not None
