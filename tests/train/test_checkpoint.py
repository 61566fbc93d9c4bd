"""Checkpoints: atomic files, the latest readable one, store identity, RNG state."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from ticktensor.errors import CheckpointError
from ticktensor.store import Store
from ticktensor.train import Checkpoints, StoreIdentity, get_rng_state, set_rng_state

from .conftest import add_day, build_store


def test_save_is_atomic_and_latest_skips_damaged(tmp_path: Path) -> None:
    ckpts = Checkpoints(tmp_path / "c", keep=2)
    assert ckpts.latest() is None
    for step in (5, 10, 15):
        ckpts.save({"step": step, "w": torch.full((3,), float(step))}, step)
    assert [p.name for p in ckpts.paths()] == ["step-000000015.pt", "step-000000010.pt"]
    assert not list((tmp_path / "c").glob(".*"))  # no temporary left behind
    found = ckpts.latest()
    assert found is not None
    path, state = found
    assert state["step"] == 15
    assert torch.equal(state["w"], torch.full((3,), 15.0))
    path.write_bytes(path.read_bytes()[:100])  # torn by hand
    with pytest.warns(RuntimeWarning, match="step-000000015.pt: not a readable checkpoint"):
        found = ckpts.latest()
    assert found is not None
    assert found[1]["step"] == 10


def test_temporaries_of_a_killed_save_are_removed(tmp_path: Path) -> None:
    ckpts = Checkpoints(tmp_path, keep=1)
    ckpts.save({"step": 1}, 1)
    stale = tmp_path / ".step-000000002.pt.123.tmp"
    stale.write_bytes(b"half a checkpoint")
    found = ckpts.latest()
    assert found is not None
    assert found[1]["step"] == 1
    assert ckpts.remove_temporaries() == [stale]
    assert not stale.exists()


def test_a_foreign_file_is_refused(tmp_path: Path) -> None:
    torch.save({"step": 3}, tmp_path / "step-000000003.pt")
    with pytest.raises(CheckpointError, match=r"not a ticktensor\.train\.checkpoint/1 file"):
        Checkpoints(tmp_path).load(tmp_path / "step-000000003.pt")


def test_store_identity_refuses_another_version_or_store(tmp_path: Path) -> None:
    url = build_store(tmp_path / "s", rows=200)
    store = Store.open(url)
    first = StoreIdentity.of(store.version(1))
    again = StoreIdentity.of(Store.open(url).version(1))
    assert first == again
    first.check_resumable(again.to_dict(), "ckpt")
    newer = Store.open(url).version(add_day(url))
    with pytest.raises(CheckpointError, match="--store-version 1") as info:
        StoreIdentity.of(newer).check_resumable(first.to_dict(), "ckpt")
    assert "trained on store version 1" in str(info.value)
    assert "opens at version 2" in str(info.value)
    rebuilt = StoreIdentity.of(Store.open(build_store(tmp_path / "s2", rows=200)).version(1))
    with pytest.raises(CheckpointError, match="another store with the same version number"):
        StoreIdentity(first.url, 1, rebuilt.manifest_sha256).check_resumable(first.to_dict(), "c")


def test_rng_state_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    ckpts = Checkpoints(tmp_path)
    ckpts.save({"rng": [get_rng_state()]}, 1)
    expected = (random.random(), np.random.random(), torch.rand(3))  # noqa: NPY002
    set_rng_state(ckpts.load(ckpts.paths()[0])["rng"][0])
    got = (random.random(), np.random.random(), torch.rand(3))  # noqa: NPY002
    assert got[:2] == expected[:2]
    assert torch.equal(got[2], expected[2])
