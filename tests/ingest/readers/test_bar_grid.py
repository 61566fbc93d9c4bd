"""Bars without volume or interval column: the length inferred, off-grid bars quarantined."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ticktensor.errors import SchemaError
from ticktensor.ingest._job import IngestOptions, ingest
from ticktensor.ingest._sources import expand_inputs
from ticktensor.ingest.readers import CsvReader, EventBatch, ParquetReader, ReadOptions
from ticktensor.ingest.readers._bar_grid import infer_interval
from ticktensor.store import Store

DATA = Path(__file__).parents[4] / "shared" / "data"
if not DATA.exists():
    DATA = Path(__file__).resolve().parents[3].parent.joinpath("shared/data")
BARS = DATA / "bars" / "btc-perp-20211231-20220201_1m.csv"
MINUTE = 60 * 10**9


def read(path: Path, **options: object) -> list[EventBatch]:
    reader = ParquetReader() if path.suffix == ".parquet" else CsvReader()
    return list(reader.read(expand_inputs([str(path)])[0], ReadOptions(**options)))  # type: ignore[arg-type]


def fx_bars(path: Path, n: int = 2000, extra: dict[int, str] | None = None) -> list[list[str]]:
    """The real BTC bars' first ``n`` rows without volume (FX-style), under a neutral name."""
    with BARS.open() as f:
        rows = [r[:5] for r in csv.reader(f)][: n + 1]
    lines = [",".join(r) for r in rows]
    for index, line in sorted((extra or {}).items()):
        lines.insert(index, line)
    path.write_text("\n".join(lines) + "\n")
    return rows[1:]


def test_infer_interval_ignores_gaps_and_order() -> None:
    ts = np.array([5, 0, 1, 2, 9, 10, 11, 12, 40], dtype=np.int64) * MINUTE
    assert infer_interval(ts) == MINUTE
    assert infer_interval(np.array([3], dtype=np.int64)) is None


@pytest.mark.parametrize("batch_rows", [300, 1 << 20])
def test_bars_without_volume_or_interval(tmp_path: Path, batch_rows: int) -> None:
    path = tmp_path / "eurusd.csv"
    off = "2021-12-31 23:30:30.000000,46000,46001,45999,46000"
    rows = fx_bars(path, extra={31: off})  # after data row 30: file row 31
    batches = read(path, kind="ohlcv", symbol="BTC", batch_rows=batch_rows)
    table = pa.concat_tables([b.table for b in batches])
    rejects = pa.concat_tables([b.rejects for b in batches])
    assert table.num_rows == len(rows) == 2000
    assert rejects.column("row").to_pylist() == [31]
    assert rejects.column("rule").to_pylist() == ["bar_grid"]
    assert "not on this file's bar grid (1 min bars" in rejects.column("message")[0].as_py()
    assert table.column("volume").null_count == 2000
    assert set(table.column("interval_ns").to_pylist()) == {MINUTE}
    assert table.column("close").to_pylist() == [float(r[4]) for r in rows]
    notes = batches[0].inference.notes if batches[0].inference else ()
    assert any(
        "interval_ns: 60000000000 ns (1 min, inferred from the timestamps)" in n for n in notes
    )
    assert any(n.startswith("volume: no column, null") for n in notes)


def test_interval_flag_overrides_and_one_bar_needs_it(tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    path.write_text("timestamp,open,high,low,close\n2024-01-02,1,2,0.5,1.5\n")
    with pytest.raises(SchemaError, match=r"cannot infer the bar length.*--interval"):
        read(path, kind="ohlcv", symbol="X")
    [batch] = read(path, kind="ohlcv", symbol="X", interval_ns=86_400 * 10**9)
    assert batch.table.column("interval_ns").to_pylist() == [86_400 * 10**9]
    named = tmp_path / "eurusd_1m.csv"  # the file name says 1m; the flag wins
    fx_bars(named, n=10)
    [batch] = read(named, kind="ohlcv", symbol="X", interval_ns=MINUTE * 2)
    assert set(batch.table.column("interval_ns").to_pylist()) == {2 * MINUTE}
    assert batch.rejects.num_rows == 5  # every other minute is off a 2-minute grid
    assert set(batch.rejects.column("rule").to_pylist()) == {"bar_grid"}


def test_parquet_bars_without_volume(tmp_path: Path) -> None:
    path = tmp_path / "bars.parquet"
    ts = (np.array([0, 1, 2, 4, 7], dtype=np.int64) + 28_000_000) * MINUTE
    table = pa.table({"time": ts // 10**6, "o": [1.0] * 5, "h": [2.0] * 5, "l": [0.5] * 5})
    pq.write_table(table.append_column("c", pa.array([1.5] * 5)), path)
    [batch] = read(path, symbol="X")
    assert batch.kind == "ohlcv"
    assert batch.table.column("ts_event").cast(pa.int64()).to_pylist() == ts.tolist()
    assert set(batch.table.column("interval_ns").to_pylist()) == {MINUTE}
    assert batch.table.column("volume").null_count == 5


def test_job_stores_bars_without_volume_with_nan_volume_features(tmp_path: Path) -> None:
    path = tmp_path / "eurusd.csv"
    fx_bars(path, n=500, extra={11: "2021-12-31 23:10:30.000000,1,1,1,1"})
    options = IngestOptions(read=ReadOptions(symbol="EURUSD"))
    result = ingest([str(path)], str(tmp_path / "store"), options, progress=False)
    [report] = result.files
    assert report.schema == "ohlcv"
    assert (report.rows_read, report.rows_stored, report.rows_quarantined) == (501, 500, 1)
    assert report.rules == {"bar_grid": 1}

    version = Store.open(str(tmp_path / "store")).version()
    assert len(version.packs) == 2  # the bars cross midnight UTC
    for pack in version.packs:
        values = version.read_pack(pack).values
        names = list(pack.feature_names)
        assert np.isnan(values[:, names.index("volume")]).all()
        assert np.isfinite(values[:, names.index("log_return")]).all()
