"""Segments are written directly, byte for byte as zarr-python writes the same arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import zarr
from zarr.storage import LocalStore

from ticktensor.kernels import crc32c
from ticktensor.store import Codec, Layout
from ticktensor.store._location import Location
from ticktensor.store._manifest import sha256_hex
from ticktensor.store._segments import open_segment, read_array, write_segment


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def zarr_python_segment(
    root: Path,
    attributes: dict[str, Any],
    ts: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    labels: npt.NDArray[np.float32],
    layout: Layout,
    array_attributes: dict[str, dict[str, Any]],
) -> dict[str, bytes]:
    """The reference: the same group and arrays (with the same attributes) through
    zarr-python's own writer."""
    group = zarr.create_group(LocalStore(root), attributes=attributes, zarr_format=3)
    rows = min(layout.chunk_rows, ts.shape[0])
    group.create_array(
        "ts",
        shape=ts.shape,
        chunks=(rows,),
        dtype="int64",
        fill_value=0,
        compressors=layout.compressors(8),
        dimension_names=["time"],
        attributes=array_attributes["ts"],
    )[...] = ts
    for name, data, dimension in (("values", values, "feature"), ("labels", labels, "label")):
        group.create_array(
            name,
            shape=data.shape,
            chunks=(rows, data.shape[1]),
            dtype="float32",
            fill_value=float("nan"),
            compressors=layout.compressors(4),
            dimension_names=["time", dimension],
            attributes=array_attributes[name],
        )[...] = data
    return files_of(root)


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("level", [None, 3])
@pytest.mark.parametrize("rows", [1, 100, 1_000, 2_500])
def test_segment_files_equal_zarr_pythons(
    tmp_path: Path, codec: Codec, level: int | None, rows: int
) -> None:
    layout = Layout(codec=codec, chunk_rows=1_000, level=level)
    rng = np.random.default_rng(rows)
    ts = np.arange(rows, dtype=np.int64) * 1_000 + 7
    values = rng.normal(size=(rows, 3)).astype(np.float32)
    values[rows // 2 :: 7, 1] = np.nan  # NaN inside a chunk
    if rows >= 2_500:
        values[1_000:2_000] = np.nan  # a chunk of NaN only: neither writer stores it
    labels = rng.normal(size=(rows, 1)).astype(np.float32)
    location = Location(str(tmp_path / "store"))
    record = write_segment(
        location,
        symbol="AAPL",
        session="2024-01-02",
        ts=ts,
        values=values,
        labels=labels,
        feature_names=["a", "b", "c"],
        label_names=["y"],
        layout=layout,
    )
    ours = files_of(tmp_path / "store" / record.path)
    group = zarr.open_group(LocalStore(tmp_path / "store" / record.path))
    arrays = {name: group[name].attrs.asdict() for name in ("ts", "values", "labels")}
    assert arrays["values"]["feature_names"] == ["a", "b", "c"]
    assert arrays["labels"]["label_names"] == ["y"]
    for name, attrs in arrays.items():  # the CRC-32C of every chunk file written
        suffix = "" if name == "ts" else "/0"
        assert attrs["chunk_crc32c"] == [
            crc32c(ours[key]) if key in ours else None
            for key in (f"{name}/c/{k}{suffix}" for k in range(len(attrs["chunk_crc32c"])))
        ]
    theirs = zarr_python_segment(
        tmp_path / "reference", group.attrs.asdict(), ts, values, labels, layout, arrays
    )
    assert sorted(ours) == sorted(theirs)
    assert all(ours[key] == theirs[key] for key in theirs), [
        key for key in theirs if ours[key] != theirs[key]
    ]
    if rows >= 2_500:
        assert "values/c/1/0" not in ours
    assert {key: entry.bytes for key, entry in record.files.items()} == {
        key: len(data) for key, data in ours.items()
    }
    assert {key: entry.sha256 for key, entry in record.files.items()} == {
        key: sha256_hex(data) for key, data in ours.items()
    }
    segment = open_segment(location, record)
    np.testing.assert_array_equal(read_array(segment.values, "values", np.float32, "t"), values)
    np.testing.assert_array_equal(read_array(segment.ts, "ts", np.int64, "t"), ts)


def test_segments_on_an_object_store_read_back(tmp_path: Path) -> None:
    location = Location("memory://zarr-write-test/store")
    ts = np.arange(1_500, dtype=np.int64)
    values = np.ones((1_500, 2), dtype=np.float32)
    record = write_segment(
        location,
        symbol="X",
        session="2024-01-02",
        ts=ts,
        values=values,
        labels=None,
        feature_names=["a", "b"],
        label_names=[],
        layout=Layout(codec=Codec.ZSTD, chunk_rows=1_000),
    )
    assert sorted(record.files) == [
        "ts/c/0",
        "ts/c/1",
        "ts/zarr.json",
        "values/c/0/0",
        "values/c/1/0",
        "values/zarr.json",
        "zarr.json",
    ]
    segment = open_segment(location, record)
    np.testing.assert_array_equal(read_array(segment.values, "values", np.float32, "t"), values)
