"""Ray Train: ``prepare_data_loader`` keeps our loader, and 2 workers get disjoint shards.

Ray re-wraps a loader in a torch ``DataLoader`` with a new ``DistributedSampler`` unless
``loader.sampler`` already is one, then wraps it again to move batches to the device.
Each worker's ids must be exactly those of our loader for that rank (so it was not
replaced by torch's per-sample path), disjoint from the other's and together complete.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, WindowDataset
from ticktensor.store import StoreVersion

from .conftest import ALL_IDS, BATCH, HERE, WINDOW, ids, read_ids, run_script

pytest.importorskip("ray.train.torch")

SEED = 13  # as in _ray_train.py


@pytest.fixture(scope="module")
def ray_run(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Run ``_ray_train.py`` once; its output folder and its output."""
    out = tmp_path_factory.mktemp("ray-train")
    script = [sys.executable, str(HERE / "_ray_train.py"), store_url, str(out)]
    output = run_script(script, timeout=240)  # Ray starts in about 35 s on 2 busy cores
    return out, output


def our_order(version: StoreVersion, rank: int, epoch: int) -> list[int]:
    """The ids of ``rank``'s pass of ``epoch`` (of 2 ranks), from our loader directly."""
    ours = DataLoader(
        WindowDataset(version, WINDOW),
        batch_size=BATCH,
        shuffle=True,
        fast=FastOptions(seed=SEED, rank=rank, world_size=2),
    )
    ours.set_epoch(epoch)
    return [i for x, _ in ours for i in ids(x)]


@pytest.mark.slow
def test_two_workers_train_on_disjoint_complete_shards(
    ray_run: tuple[Path, str], version: StoreVersion
) -> None:
    out, output = ray_run
    for rank in range(2):
        warned = (out / f"warnings-rank{rank}.txt").read_text()
        assert not warned, f"rank {rank} warned:\n{warned}\n{output[-4000:]}"
    for epoch in (0, 2):
        shards = [read_ids(out / f"epoch{epoch}-rank{r}.txt") for r in range(2)]
        assert [len(s) for s in shards] == [len(ALL_IDS) // 2] * 2, epoch
        assert not set(shards[0]) & set(shards[1]), f"epoch {epoch}: the ranks share samples"
        assert set(shards[0]) | set(shards[1]) == ALL_IDS
    for rank in range(2):  # our loader's own order: Ray did not replace it
        assert read_ids(out / f"epoch0-rank{rank}.txt") == our_order(version, rank, 0), rank
        partial = read_ids(out / f"epoch1-rank{rank}.txt")  # stopped after 2 batches
        assert partial == our_order(version, rank, 1)[: 2 * BATCH], rank


@pytest.mark.slow
def test_set_epoch_through_the_prepared_loader(
    ray_run: tuple[Path, str], version: StoreVersion
) -> None:
    """Ray's documented loop calls ``loader.sampler.set_epoch(epoch)`` on what
    ``prepare_data_loader`` returned (a wrapper that copies the loader's ``__dict__``);
    after the abandoned epoch 1, only that call brings the loader to epoch 2."""
    out, _ = ray_run
    for rank in range(2):
        assert (out / f"set_epoch-rank{rank}.txt").read_text() == "", rank
        assert read_ids(out / f"epoch2-rank{rank}.txt") == our_order(version, rank, 2), rank
