"""torch's dataset and sampler wrappers stay on the fast path; other hooks say they leave it."""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
from torch.utils.data import (
    ConcatDataset,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    random_split,
)

import ticktensor
from ticktensor.errors import SlowPathWarning
from ticktensor.loaders import WindowDataset
from ticktensor.store import StoreVersion

from .conftest import SAMPLES, WINDOW, LoaderFactory, all_ids


def fast(loader: object) -> bool:
    """torch's loader is the reference; ours must be on the fast path."""
    return not isinstance(loader, ticktensor.DataLoader) or loader.fast


def quiet(make: LoaderFactory, *args: object, **kwargs: object) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowPathWarning)
        return make(*args, **kwargs)


def test_subset(make_loader: LoaderFactory, dataset: WindowDataset, id_of: list[int]) -> None:
    picked = [5, 3, 99, 0, 64, 17, 120, 8, 9]
    loader = quiet(make_loader, Subset(dataset, picked), batch_size=4)
    assert fast(loader)
    assert all_ids(loader) == [id_of[i] for i in picked]


def test_random_split(make_loader: LoaderFactory, dataset: WindowDataset) -> None:
    parts = random_split(dataset, [0.75, 0.25], generator=torch.Generator().manual_seed(1))
    seen = []
    for part in parts:
        loader = quiet(make_loader, part, batch_size=16, shuffle=True)
        assert fast(loader)
        ids = all_ids(loader)
        assert len(ids) == len(part)
        seen += ids
    assert len(set(seen)) == SAMPLES


def test_concat_dataset(
    make_loader: LoaderFactory, version: StoreVersion, dataset: WindowDataset, id_of: list[int]
) -> None:
    a = WindowDataset(version, WINDOW, symbols=["S2", "S0"])
    b = WindowDataset(version, WINDOW, symbols=["S3"])
    joined = ConcatDataset([a, Subset(b, [4, 2]), a])
    loader = quiet(make_loader, joined, batch_size=8)
    assert fast(loader)
    reference = torch.utils.data.DataLoader(joined, batch_size=8)
    assert all_ids(loader) == all_ids(reference)
    assert len(all_ids(loader)) == 2 * len(a) + 2


def test_concat_of_subsets_of_one_dataset(
    make_loader: LoaderFactory, dataset: WindowDataset, id_of: list[int]
) -> None:
    train, val = random_split(dataset, [100, 28], generator=torch.Generator().manual_seed(2))
    loader = quiet(make_loader, ConcatDataset([val, train]), batch_size=32)
    assert fast(loader)
    assert all_ids(loader) == [id_of[i] for i in [*val.indices, *train.indices]]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [True, False])
def test_distributed_sampler(
    make_loader: LoaderFactory, dataset: WindowDataset, shuffle: bool, drop_last: bool
) -> None:
    world = 3  # 128 samples over 3 ranks: the sampler pads or drops
    per_rank = []
    for rank in range(world):
        sampler = DistributedSampler(
            dataset, num_replicas=world, rank=rank, shuffle=shuffle, seed=4, drop_last=drop_last
        )
        loader = quiet(make_loader, dataset, batch_size=8, sampler=sampler)
        assert fast(loader)
        theirs = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler)
        assert len(loader) == len(theirs)
        per_rank.append(all_ids(loader))
    counts = Counter(i for ids in per_rank for i in ids)
    assert all(len(ids) == len(per_rank[0]) for ids in per_rank)  # equal work per rank
    if drop_last:
        assert max(counts.values()) == 1
        assert len(counts) == SAMPLES // world * world
    else:
        assert len(counts) == SAMPLES  # complete; the padding repeats a few samples
        assert sum(counts.values()) == -(-SAMPLES // world) * world


def test_distributed_sampler_set_epoch_reshuffles(
    make_loader: LoaderFactory, dataset: WindowDataset
) -> None:
    sampler = DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True, seed=0)
    loader = quiet(make_loader, dataset, batch_size=8, sampler=sampler)
    sampler.set_epoch(0)
    first = all_ids(loader)
    sampler.set_epoch(1)
    second = all_ids(loader)
    sampler.set_epoch(0)
    assert all_ids(loader) == first
    assert second != first


@pytest.mark.parametrize("kind", ["sequential", "random", "subset-random"])
def test_common_samplers(
    make_loader: LoaderFactory, dataset: WindowDataset, id_of: list[int], kind: str
) -> None:
    picked = list(range(0, SAMPLES, 3))
    sampler = {
        "sequential": SequentialSampler(dataset),
        "random": RandomSampler(dataset),
        "subset-random": SubsetRandomSampler(picked),
    }[kind]
    loader = quiet(make_loader, dataset, batch_size=16, sampler=sampler)
    assert fast(loader)
    seen = all_ids(loader)
    want = [id_of[i] for i in (picked if kind == "subset-random" else range(SAMPLES))]
    if kind == "sequential":
        assert seen == want
    else:
        assert sorted(seen) == sorted(want)
        assert seen != sorted(seen)


def test_a_per_sample_collate_fn_warns_once_and_still_works(
    dataset: WindowDataset, id_of: list[int]
) -> None:
    def stack(
        samples: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples])

    with pytest.warns(SlowPathWarning, match=r"collate_fn=stack .*batch_transform=") as record:
        loader = ticktensor.DataLoader(dataset, batch_size=16, collate_fn=stack)
    assert len(record) == 1
    assert not loader.fast
    assert all_ids(loader) == id_of


def test_batch_transform_on_the_fast_path(dataset: WindowDataset, id_of: list[int]) -> None:
    def halve(batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
        x, y = batch
        return {"x": x, "y": y / 2}

    loader = quiet(ticktensor.DataLoader, dataset, batch_size=16, batch_transform=halve)
    assert loader.fast
    batches = list(loader)
    assert [int(v) for b in batches for v in b["x"][:, 0, 0]] == id_of
    plain = list(ticktensor.DataLoader(dataset, batch_size=16))
    assert all(torch.equal(b["y"], p[1] / 2) for b, p in zip(batches, plain, strict=True))
