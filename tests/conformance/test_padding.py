"""Sharding an epoch the ranks cannot split evenly: torch's DistributedSampler padding."""

from __future__ import annotations

from collections import Counter

import pytest
from torch.utils.data import DistributedSampler, Subset

import ticktensor
from ticktensor.loaders import FastOptions, WindowDataset

from .conftest import LoaderFactory, all_ids, ids

# 125 and 127 leave a remainder with 2, 3 and 4 ranks.
SIZES = (125, 127)


def rank_loaders(
    make_loader: LoaderFactory, data: Subset[int], world: int, **kwargs: object
) -> list[object]:
    """One loader per rank, as each rank of a DDP job builds it: torch's with the
    ``DistributedSampler`` a client (Lightning, accelerate) adds, ours sharding by itself."""
    shuffle = bool(kwargs.pop("shuffle", False))
    if make_loader is ticktensor.DataLoader:
        return [
            make_loader(data, shuffle=shuffle, fast=FastOptions(rank=r, world_size=world), **kwargs)
            for r in range(world)
        ]
    return [
        make_loader(
            data,
            sampler=DistributedSampler(data, num_replicas=world, rank=r, shuffle=shuffle),
            **kwargs,
        )
        for r in range(world)
    ]


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("drop_last", [False, True])
def test_counts_per_rank_are_torchs(
    make_loader: LoaderFactory, dataset: WindowDataset, world: int, size: int, drop_last: bool
) -> None:
    data = Subset(dataset, range(size))
    loaders = rank_loaders(make_loader, data, world, batch_size=8, drop_last=drop_last)
    per_rank = [[len(ids(b)) for b in loader] for loader in loaders]  # type: ignore[attr-defined]
    per_rank_samples = -(-size // world)
    batches = per_rank_samples // 8 if drop_last else -(-per_rank_samples // 8)
    for loader, sizes in zip(loaders, per_rank, strict=True):
        assert len(loader) == len(sizes) == batches  # type: ignore[arg-type]
        if not drop_last:
            assert sum(sizes) == per_rank_samples
            assert sizes[:-1] == [8] * (batches - 1)


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("size", SIZES)
def test_evaluation_sees_every_sample_and_torchs_repeats(
    make_loader: LoaderFactory, dataset: WindowDataset, id_of: list[int], world: int, size: int
) -> None:
    """An unshuffled pass over all ranks: every sample, plus ``DistributedSampler``'s
    padding (the first ``world - size % world`` samples again), the same multiset as torch."""
    data = Subset(dataset, range(size))
    loaders = rank_loaders(make_loader, data, world, batch_size=8)
    seen = Counter(i for loader in loaders for i in all_ids(loader))  # type: ignore[arg-type]
    padding = -size % world
    assert seen == Counter(id_of[:size] + id_of[:padding])


@pytest.mark.parametrize(("world", "size"), [(3, 1), (4, 1), (4, 2), (4, 3)])
def test_fewer_samples_than_ranks(
    make_loader: LoaderFactory, dataset: WindowDataset, id_of: list[int], world: int, size: int
) -> None:
    """Every rank still gets one sample: the order repeated as often as it takes."""
    data = Subset(dataset, range(size))
    loaders = rank_loaders(make_loader, data, world, batch_size=8)
    per_rank = [all_ids(loader) for loader in loaders]  # type: ignore[arg-type]
    assert [len(ids) for ids in per_rank] == [1] * world
    assert Counter(i for ids in per_rank for i in ids) == Counter(
        [id_of[j % size] for j in range(world)]
    )


@pytest.mark.parametrize("world", [2, 3, 4])
def test_shuffled_training_pads_at_most_world_minus_one(
    make_loader: LoaderFactory, dataset: WindowDataset, world: int
) -> None:
    data = Subset(dataset, range(SIZES[1]))
    loaders = rank_loaders(make_loader, data, world, batch_size=8, shuffle=True)
    seen = Counter(i for loader in loaders for i in all_ids(loader))  # type: ignore[arg-type]
    assert len(seen) == SIZES[1]
    assert sum(seen.values()) - SIZES[1] == -SIZES[1] % world
    assert max(seen.values()) <= 2


def test_whole_step_padding_stays_available(dataset: WindowDataset) -> None:
    """``pad="steps"``: every batch on every rank is full (equal shapes on every rank)."""
    data = Subset(dataset, range(SIZES[0]))
    for world in (2, 3):
        loaders = [
            ticktensor.DataLoader(
                data, batch_size=8, fast=FastOptions(rank=r, world_size=world, pad="steps")
            )
            for r in range(world)
        ]
        sizes = {len(ids(b)) for loader in loaders for b in loader}
        assert sizes == {8}
        assert len(loaders[0]) == -(-SIZES[0] // (8 * world))


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("size", SIZES)
def test_a_sampler_that_repeats_nothing_is_followed(
    make_loader: LoaderFactory, dataset: WindowDataset, id_of: list[int], world: int, size: int
) -> None:
    """Lightning's ``predict`` under DDP gives the loader an ``UnrepeatedDistributedSampler``
    (a ``DistributedSampler`` whose ranks may differ by one sample): every sample once,
    the counts per rank of that sampler, on torch's loader and ours alike."""
    from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

    data = Subset(dataset, range(size))
    loaders = [
        make_loader(
            data,
            batch_size=8,
            sampler=UnrepeatedDistributedSampler(data, num_replicas=world, rank=r, shuffle=False),
        )
        for r in range(world)
    ]
    per_rank = [all_ids(loader) for loader in loaders]
    assert [len(seen) for seen in per_rank] == [len(range(r, size, world)) for r in range(world)]
    assert sorted(i for seen in per_rank for i in seen) == sorted(id_of[:size])
