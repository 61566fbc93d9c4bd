"""The pack of a small partition (daily bars: a few thousand rows) is written straight into
its folder; a large one grows in a working folder; both are the same bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ticktensor.store import Codec, Layout, Store
from ticktensor.store import _pack_writer as pack_writer

FEATURES = ("f0", "f1", "f2")


def _rows(counts: list[int]) -> dict[str, Any]:
    rng = np.random.default_rng(3)
    n = sum(counts)
    return {
        "symbols": [f"S{i:03d}" for i in range(len(counts))],
        "offsets": np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        "ts": np.concatenate([np.arange(c, dtype=np.int64) * 86_400 * 10**9 for c in counts]),
        "values": rng.standard_normal((n, len(FEATURES))).astype(np.float32),
        "labels": rng.standard_normal((n, 1)).astype(np.float32),
    }


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _written(
    root: Path, counts: list[int], layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, bytes], int]:
    """The files of the pack of ``counts`` rows per symbol, appended a symbol at a time,
    and how many working folders its writer made."""
    made = []

    class Counted(pack_writer._Spill):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(pack_writer, "_Spill", Counted)
    store, data = Store.create(str(root)), _rows(counts)
    writer = store.pack_writer(
        session="all", feature_names=FEATURES, label_names=("y",), layout=layout
    )
    for i, symbol in enumerate(data["symbols"]):
        lo, hi = int(data["offsets"][i]), int(data["offsets"][i + 1])
        writer.append(
            [symbol], [0, hi - lo], data["ts"][lo:hi], data["values"][lo:hi], data["labels"][lo:hi]
        )
    record = writer.finish()
    version = store.commit(packs=[record])
    got = version.read_pack(record, verify=True)
    np.testing.assert_array_equal(got.values, data["values"])
    np.testing.assert_array_equal(got.ts, data["ts"])
    assert not list((root / "packs").glob("*.writing-*"))
    return _files(root / record.path), len(made)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_small_pack_needs_no_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    layout = Layout(codec=Codec(codec), chunk_rows=256)
    small, folders = _written(tmp_path / "a", [5_043], layout, monkeypatch)
    assert folders == 0
    monkeypatch.setattr(pack_writer, "SPILL_BYTES", 0)  # every chunk to a working folder
    spilled, folders = _written(tmp_path / "b", [5_043], layout, monkeypatch)
    assert folders == 1
    assert small == spilled


def test_a_pack_that_outgrows_memory_hands_its_held_chunks_to_a_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = Layout(chunk_rows=256)
    held, folders = _written(tmp_path / "a", [3_000, 2_000, 4_000], layout, monkeypatch)
    assert folders == 0
    # Past the first symbol's chunks: those held are written out, and the rest as they come.
    monkeypatch.setattr(pack_writer, "SPILL_BYTES", 3_000 * 4 * 4)
    spilled, folders = _written(tmp_path / "b", [3_000, 2_000, 4_000], layout, monkeypatch)
    assert folders == 1
    assert held == spilled
