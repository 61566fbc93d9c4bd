"""torch's attributes and argument checks, on torch's loader and ours."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, Sampler, default_collate

from ticktensor.loaders import WindowDataset

from .conftest import LoaderFactory, all_ids, ids, is_ours


def test_torchs_attributes_exist_with_torchs_meaning(
    make_loader: LoaderFactory, dataset: WindowDataset
) -> None:
    generator = torch.Generator().manual_seed(3)
    loader = make_loader(dataset, batch_size=8, shuffle=True, generator=generator)
    assert loader.dataset is dataset
    assert loader.batch_size == 8
    assert loader.drop_last is False
    assert loader.num_workers == 0
    assert loader.prefetch_factor is None  # torch's value without workers
    assert loader.persistent_workers is False
    assert loader.worker_init_fn is None
    assert loader.multiprocessing_context is None
    assert loader.pin_memory is False
    assert loader.pin_memory_device == ""
    assert loader.timeout == 0
    assert loader.generator is generator
    assert loader.collate_fn is default_collate
    assert isinstance(loader.sampler, Sampler)
    assert isinstance(loader.batch_sampler, BatchSampler)
    assert loader.batch_sampler.batch_size == 8
    assert len(loader.batch_sampler) == len(loader)
    assert len(loader.sampler) == len(dataset)
    assert callable(loader.sampler.__iter__)


def test_batch_sampler_lists_the_next_pass(
    make_loader: LoaderFactory, dataset: WindowDataset, id_of: list[int]
) -> None:
    loader = make_loader(dataset, batch_size=12)
    planned = [[id_of[i] for i in batch] for batch in loader.batch_sampler]
    assert planned == [ids(b) for b in loader]
    assert sorted(loader.sampler) == list(range(len(dataset)))


def test_batch_sampler_follows_a_shuffled_pass(dataset: WindowDataset, id_of: list[int]) -> None:
    """ticktensor's batch_sampler names the batches the next ``iter()`` hands out, also
    shuffled and mid-epoch, so a client that rebuilds a loader from it (accelerate's
    ``skip_first_batches``) reads the same samples."""
    import ticktensor

    loader = ticktensor.DataLoader(dataset, batch_size=12, shuffle=True)
    for _ in range(2):
        planned = [[id_of[i] for i in batch] for batch in loader.batch_sampler]
        assert planned == [ids(b) for b in loader]
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    loader.load_state_dict(state)
    planned = [[id_of[i] for i in batch] for batch in loader.batch_sampler]
    assert planned == [ids(b) for b in loader]
    assert len(planned) == len(loader) - 1


def _raises(make: Callable[[], Any]) -> str:
    with pytest.raises(ValueError) as info:  # noqa: PT011 - the message is compared below
        make()
    return str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"persistent_workers": True},
        {"prefetch_factor": 2},
        {"num_workers": -1},
        {"timeout": -1},
        {"batch_sampler": [[0, 1]], "batch_size": 2},
        {"batch_sampler": [[0, 1]], "shuffle": True, "batch_size": None},
        {"sampler": [0, 1], "shuffle": True},
        {"batch_size": None, "drop_last": True},
    ],
    ids=repr,
)
def test_torchs_argument_errors(dataset: WindowDataset, kwargs: dict[str, Any]) -> None:
    import ticktensor

    theirs = _raises(lambda: torch.utils.data.DataLoader(dataset, **kwargs))
    ours = _raises(lambda: ticktensor.DataLoader(dataset, **kwargs))
    assert ours == theirs


@pytest.mark.parametrize("copier", [copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))])
def test_a_copy_yields_the_same_batches(
    make_loader: LoaderFactory, dataset: WindowDataset, copier: Callable[[Any], Any]
) -> None:
    loader = make_loader(dataset, batch_size=16)
    next(iter(loader))  # a loader that has run, with a thread and buffers on ours
    twin = copier(loader)
    assert type(twin) is type(loader)
    assert all_ids(twin) == all_ids(loader)


def test_a_copy_keeps_the_position(dataset: WindowDataset) -> None:
    import ticktensor

    loader = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    all_ids(loader)
    it = iter(loader)
    next(it)
    loader.load_state_dict(loader.state_dict())  # a pending resume travels too
    twin = pickle.loads(pickle.dumps(loader))
    assert (
        twin.state_dict()
        == loader.state_dict()
        == {
            "epoch": 1,
            "seed": 0,
            "samples_consumed": 16,
        }
    )
    assert all_ids(twin) == all_ids(loader)
    assert is_ours(twin)
