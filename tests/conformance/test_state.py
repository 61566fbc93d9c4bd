"""``state_dict()`` describes what the loader's next pass does, whatever ended the last one.

On both loaders the next pass after a ``break``, an exception or a copy is a whole epoch
from its beginning; on ours, a fresh loader given ``state_dict()`` then does the same.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import pytest

import ticktensor
from ticktensor.loaders import WindowDataset

from .conftest import SAMPLES, LoaderFactory, all_ids, is_ours


def broken_at(loader: Any, step: int) -> None:
    for seen, _ in enumerate(loader):
        if seen == step:
            break


def raised_at(loader: Any, step: int) -> None:
    def train() -> None:
        for seen, _ in enumerate(loader):
            if seen == step:
                raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        train()


def closed_at(loader: Any, step: int) -> None:
    it = iter(loader)
    for _ in range(step + 1):
        next(it)
    if is_ours(loader):
        it.close()
    else:
        del it


def a_fresh_loader_from(loader: Any, dataset: WindowDataset) -> ticktensor.DataLoader:
    fresh = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    fresh.load_state_dict(loader.state_dict())
    return fresh


@pytest.mark.parametrize("stop", [broken_at, raised_at, closed_at])
def test_state_after_an_abandoned_pass(
    make_loader: LoaderFactory, dataset: WindowDataset, stop: Callable[[Any, int], None]
) -> None:
    loader = make_loader(dataset, batch_size=16, shuffle=True)
    stop(loader, 3)
    if is_ours(loader):
        assert loader.state_dict()["samples_consumed"] == 0
        expected = all_ids(a_fresh_loader_from(loader, dataset))
    nxt = all_ids(loader)
    assert len(set(nxt)) == len(nxt) == SAMPLES
    if is_ours(loader):
        assert nxt == expected


def test_state_after_an_abandoned_resumed_pass(dataset: WindowDataset) -> None:
    loader = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    loader.load_state_dict({"epoch": 2, "seed": 0, "samples_consumed": 48})
    assert loader.state_dict()["samples_consumed"] == 48  # pending: the next pass resumes
    broken_at(loader, 1)
    assert loader.state_dict() == {"epoch": 2, "seed": 0, "samples_consumed": 0}
    assert all_ids(a_fresh_loader_from(loader, dataset)) == all_ids(loader)


@pytest.mark.parametrize("copier", [copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))])
def test_state_of_a_copy_made_mid_pass(
    make_loader: LoaderFactory, dataset: WindowDataset, copier: Callable[[Any], Any]
) -> None:
    loader = make_loader(dataset, batch_size=16, shuffle=False)
    it = iter(loader)
    next(it)
    next(it)
    twin = copier(loader)
    if is_ours(loader):
        assert loader.state_dict()["samples_consumed"] == 32  # the running pass's position
        state = twin.state_dict()
        fresh = ticktensor.DataLoader(dataset, batch_size=16, shuffle=False)
        fresh.load_state_dict(state)
        expected = all_ids(fresh)
    seen = all_ids(twin)  # a copy starts the epoch again, as a copy of torch's loader does
    assert len(seen) == SAMPLES
    if is_ours(loader):
        assert seen == expected
    del it


def test_state_while_a_pass_runs_and_after_its_end(dataset: WindowDataset) -> None:
    loader = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    it = iter(loader)
    assert loader.state_dict()["samples_consumed"] == 0  # begun at the first batch only
    next(it)
    next(it)
    assert loader.state_dict() == {"epoch": 0, "seed": 0, "samples_consumed": 32}
    rest = all_ids(a_fresh_loader_from(loader, dataset))
    assert all_ids(it) == rest  # the running pass continues as a resume would
    assert loader.state_dict() == {"epoch": 1, "seed": 0, "samples_consumed": 0}
