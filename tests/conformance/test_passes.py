"""Passes and epochs as a loop, Lightning's fit loop or ``islice`` sees them, torch's and ours."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from ticktensor.loaders import WindowDataset

from .conftest import SAMPLES, LoaderFactory, all_ids, ids, is_ours


@pytest.mark.parametrize(
    ("batch_size", "drop_last"), [(8, False), (12, False), (12, True), (200, True)]
)
def test_len_counts_the_batches_of_a_pass(
    make_loader: LoaderFactory, dataset: WindowDataset, batch_size: int, drop_last: bool
) -> None:
    loader = make_loader(dataset, batch_size=batch_size, drop_last=drop_last)
    expected = SAMPLES // batch_size if drop_last else -(-SAMPLES // batch_size)
    assert len(loader) == expected
    batches = list(loader)
    assert len(batches) == expected
    sizes = [len(ids(b)) for b in batches]
    if not drop_last and SAMPLES % batch_size:
        assert sizes[-1] == SAMPLES % batch_size
    assert all(size == batch_size for size in sizes[: expected - (not drop_last)])


def test_a_pass_stopped_at_len_is_complete(
    make_loader: LoaderFactory, dataset: WindowDataset
) -> None:
    """Lightning's loops stop after ``len(loader)`` batches without asking for one more."""
    loader = make_loader(dataset, batch_size=16, shuffle=True)
    counts = [sum(1 for _ in itertools.islice(loader, len(loader))) for _ in range(3)]
    assert counts == [len(loader)] * 3


def test_each_iter_starts_a_pass(make_loader: LoaderFactory, dataset: WindowDataset) -> None:
    loader = make_loader(dataset, batch_size=16)
    assert ids(next(iter(loader))) == ids(next(iter(loader)))


def test_a_broken_loop_leaves_the_next_pass_whole(
    make_loader: LoaderFactory, dataset: WindowDataset
) -> None:
    loader = make_loader(dataset, batch_size=16, shuffle=True)
    for step, _ in enumerate(loader):
        if step == 2:
            break
    assert sum(1 for _ in loader) == len(loader)


def test_an_exception_in_the_loop_leaves_the_next_pass_whole(
    make_loader: LoaderFactory, dataset: WindowDataset
) -> None:
    loader = make_loader(dataset, batch_size=16, shuffle=True)

    def train() -> None:
        for step, _ in enumerate(loader):
            if step == 3:
                raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        train()
    seen = all_ids(loader)
    assert len(seen) == SAMPLES
    assert len(set(seen)) == SAMPLES


def test_every_pass_covers_every_sample_once_and_epochs_reshuffle(
    make_loader: LoaderFactory, dataset: WindowDataset
) -> None:
    loader = make_loader(dataset, batch_size=16, shuffle=True)
    passes = [all_ids(loader) for _ in range(3)]
    for seen in passes:
        assert Counter(seen) == Counter(passes[0])
        assert len(set(seen)) == SAMPLES
    assert passes[0] != passes[1] != passes[2]


def test_unshuffled_passes_repeat(make_loader: LoaderFactory, dataset: WindowDataset) -> None:
    loader = make_loader(dataset, batch_size=12)
    first = all_ids(loader)
    assert first == sorted(first)
    assert all_ids(loader) == first


def test_nested_iterators_are_independent_passes(
    make_loader: LoaderFactory, dataset: WindowDataset
) -> None:
    loader = make_loader(dataset, batch_size=32)
    outer = iter(loader)
    first = ids(next(outer))
    inner = all_ids(loader)  # a whole pass while the outer one is open
    assert len(inner) == SAMPLES
    assert inner[:32] == first


def test_order_is_fixed_by_seed_and_epoch(dataset: WindowDataset) -> None:
    """Where ticktensor differs on purpose: a shuffled order is a function of (seed, epoch),
    not of the global RNG, so two loaders with one seed agree, and set_epoch replays one."""
    import ticktensor

    a = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    b = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    first_a, second_a = all_ids(a), all_ids(a)
    assert all_ids(b) == first_a
    b.set_epoch(1)
    assert all_ids(b) == second_a
    b.set_epoch(0)
    assert all_ids(b) == first_a


def test_a_pass_ends_the_epoch_at_its_last_batch(dataset: WindowDataset) -> None:
    """The epoch moves on when the last batch is handed out, not when one more is asked."""
    import ticktensor

    loader = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    it = iter(loader)
    for _ in range(len(loader) - 1):
        next(it)
    assert loader.epoch == 0
    assert loader.state_dict()["samples_consumed"] == (len(loader) - 1) * 16
    next(it)
    assert loader.state_dict() == {"epoch": 1, "seed": 0, "samples_consumed": 0}
    with pytest.raises(StopIteration):
        next(it)
    assert loader.epoch == 1


def test_an_abandoned_pass_keeps_the_epoch(dataset: WindowDataset) -> None:
    import ticktensor

    loader = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    first = all_ids(itertools.islice(loader, 3))
    assert loader.epoch == 0
    assert all_ids(itertools.islice(loader, 3)) == first


def test_load_state_dict_resumes_one_pass_only(dataset: WindowDataset) -> None:
    import ticktensor

    loader = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    whole = all_ids(loader)  # epoch 0
    second = all_ids(loader)  # epoch 1
    loader.set_epoch(0)
    it = iter(loader)
    head = all_ids([next(it), next(it), next(it)])
    state = loader.state_dict()
    del it
    resumed = ticktensor.DataLoader(dataset, batch_size=16, shuffle=True)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # the epoch it is in: keeps the pending resume
    assert head + all_ids(resumed) == whole
    assert all_ids(resumed) == second  # the resumed pass finished epoch 0
    assert is_ours(resumed)
