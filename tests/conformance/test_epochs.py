"""When a pass learns its epoch: at its first batch, as torch's sampler iterator does."""

from __future__ import annotations

import torch
from torch.utils.data import DistributedSampler

import ticktensor
from ticktensor.loaders import WindowDataset

from .conftest import LoaderFactory, all_ids, ids


def sampler(dataset: WindowDataset, epoch: int | None = None) -> DistributedSampler[int]:
    made: DistributedSampler[int] = DistributedSampler(
        dataset, num_replicas=2, rank=0, shuffle=True, seed=5
    )
    if epoch is not None:
        made.set_epoch(epoch)
    return made


def reference(make_loader: LoaderFactory, dataset: WindowDataset, epoch: int) -> list[int]:
    """The pass of ``epoch``, with the epoch set after the loader is built and before iter()."""
    given = sampler(dataset)
    loader = make_loader(dataset, batch_size=8, sampler=given)
    given.set_epoch(epoch)
    return all_ids(loader)


def test_sampler_set_epoch_between_iter_and_the_first_batch(
    make_loader: LoaderFactory, dataset: WindowDataset
) -> None:
    """Lightning's fit loop: ``iter(loader)``, then ``sampler.set_epoch(e)``, then ``next()``."""
    given = sampler(dataset)
    loader = make_loader(dataset, batch_size=8, sampler=given)
    it = iter(loader)
    given.set_epoch(2)
    seen = all_ids(it)
    assert seen == reference(make_loader, dataset, 2)
    assert seen != reference(make_loader, dataset, 0)


def test_sampler_set_epoch_before_the_loader_exists(
    make_loader: LoaderFactory, dataset: WindowDataset
) -> None:
    loader = make_loader(dataset, batch_size=8, sampler=sampler(dataset, epoch=3))
    seen = all_ids(loader)
    assert seen == reference(make_loader, dataset, 3)
    assert seen != reference(make_loader, dataset, 0)


def test_epoch_is_read_at_the_first_batch_of_every_pass(
    make_loader: LoaderFactory, dataset: WindowDataset
) -> None:
    given = sampler(dataset)
    loader = make_loader(dataset, batch_size=8, sampler=given)
    passes = []
    for epoch in range(3):
        it = iter(loader)
        given.set_epoch(epoch)
        passes.append(all_ids(it))
    assert passes == [reference(make_loader, dataset, epoch) for epoch in range(3)]


def test_loader_set_epoch_between_iter_and_the_first_batch(dataset: WindowDataset) -> None:
    """Ours also has ``loader.set_epoch`` and ``loader.sampler.set_epoch`` without a sampler."""
    plain = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    plain.set_epoch(2)
    epoch2 = all_ids(plain)
    for setter in ("loader", "sampler"):
        loader = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
        all_ids(loader)  # a whole pass: the loader moved to epoch 1 by itself
        it = iter(loader)
        (loader if setter == "loader" else loader.sampler).set_epoch(2)
        assert all_ids(it) == epoch2, setter
        assert loader.epoch == 3


def test_set_epoch_after_the_first_batch_keeps_the_running_pass(dataset: WindowDataset) -> None:
    loader = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    whole = all_ids(loader)
    loader.set_epoch(0)
    it = iter(loader)
    first = ids(next(it))
    loader.set_epoch(4)  # the running pass keeps its order; the next pass is epoch 4's
    assert first + all_ids(it) == whole
    again = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    again.set_epoch(4)
    assert all_ids(loader) == all_ids(again)
    assert torch.is_tensor(next(iter(loader))[0])
