"""A pack is plain Zarr v3: xarray and tensorstore read its sharded arrays unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ticktensor.store import Codec, Layout, PackRecord, Store

FEATURES = ["f0", "f1", "f2"]


@pytest.fixture(scope="module", params=[Codec.NONE, Codec.ZSTD, Codec.BLOSC])
def pack(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> tuple[Path, PackRecord, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("interop") / "store"
    store = Store.create(str(root), layout=Layout(codec=request.param, chunk_rows=16))
    rng = np.random.default_rng(0)
    offsets = np.array([0, 20, 21, 57], dtype=np.int64)
    n = int(offsets[-1])
    arrays = {
        "ts": np.concatenate([np.arange(20), [5], np.arange(36)]).astype(np.int64),
        "values": rng.standard_normal((n, len(FEATURES))).astype(np.float32),
        "labels": rng.standard_normal((n, 1)).astype(np.float32),
    }
    record = store.write_pack(
        session="2024-01-02",
        symbols=["A", "B", "C"],
        offsets=offsets,
        feature_names=FEATURES,
        label_names=["y"],
        **arrays,
    )
    store.commit(packs=[record])
    return root, record, arrays


def test_xarray_opens_a_pack_as_a_dataset(
    pack: tuple[Path, PackRecord, dict[str, np.ndarray]],
) -> None:
    xr = pytest.importorskip("xarray")
    root, record, arrays = pack
    ds = xr.open_zarr(str(root / record.path), consolidated=False, zarr_format=3)
    assert ds["values"].dims == ("time", "feature")
    for name, want in arrays.items():
        np.testing.assert_array_equal(ds[name].values, want)
    assert ds.attrs["ticktensor"]["symbols"] == ["A", "B", "C"]


def test_tensorstore_reads_the_sharded_arrays(
    pack: tuple[Path, PackRecord, dict[str, np.ndarray]],
) -> None:
    ts = pytest.importorskip("tensorstore")
    root, record, arrays = pack
    for name, want in arrays.items():
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(root / record.path / name)},
        }
        got = ts.open(spec, read=True).result().read().result()
        np.testing.assert_array_equal(got, want)
