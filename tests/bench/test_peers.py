"""Peers: measured through their adapter when installed, else a row saying why not."""

from __future__ import annotations

from pathlib import Path

import pytest

from ticktensor.bench import Workload
from ticktensor.bench.peers import PEERS, peer_methods, peer_rows


def test_every_peer_not_measured_has_a_reason() -> None:
    rows = peer_rows()
    assert [r.name for r in rows] == [p.name for p in PEERS]
    for row in rows:
        assert row.samples_per_s is None
        assert row.kind == "peer"
        assert row.note.startswith(("not installed (pip install", "installed, but"))
    assert [r.name for r in peer_rows({"spdl"})] == [p.name for p in PEERS[1:]]


def test_spdl_adapter_on_a_tiny_workload(tmp_path: Path) -> None:
    pytest.importorskip("spdl.pipeline")
    from ticktensor.bench.baselines import MmapWindows
    from ticktensor.bench.engine import open_dataset
    from ticktensor.bench.workload import prepare
    from ticktensor.loaders import UniformOrder

    w = Workload(symbols=2, rows=400, features=3, window=8, batch=16, cache_dir=tmp_path)
    version = prepare(w, ["none"], say=lambda _: None)
    ds = open_dataset(version, w.window, 1)
    order = UniformOrder(0).order(ds, 0)
    arrays = MmapWindows(w.npy_dir(), w.symbols, w.window)
    rep = peer_methods(ds, arrays, w.batch, order, 0.05, 2)["spdl"](0)
    assert rep.samples > 0
    assert rep.samples % w.batch == 0
