"""DataLoader: torch compatibility, fast path vs a slow reference, shutdown, errors, resume."""

from __future__ import annotations

import _thread
import gc
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from torch.utils.data import TensorDataset

import ticktensor
from tests.one_pack import one_pack_store
from ticktensor.errors import ConfigError, SlowPathWarning
from ticktensor.loaders import FastOptions, SequentialOrder, UniformOrder, WindowDataset
from ticktensor.loaders.dataloader import DataLoader
from ticktensor.store import StoreVersion, open_store

WINDOW = 4
ROWS = (70, 53, 81)  # three symbols of different lengths: 195 windows of 4 rows


def build_version(path: Path) -> StoreVersion:
    """Feature 0 of each row is ``1000 * symbol + row``: a window's first value names it."""
    return one_pack_store(
        path,
        ROWS,
        lambda s, r: np.stack([1000 * s + r, -r, r / 7], axis=1),
        lambda r: r[:, None] * 2,
        ("id", "neg", "frac"),
        ("y",),
        message="dataloader tests",
    )


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> StoreVersion:
    return build_version(tmp_path_factory.mktemp("store") / "store")


@pytest.fixture
def dataset(version: StoreVersion) -> WindowDataset:
    return WindowDataset(version, WINDOW)


def reference(dataset: WindowDataset, indices: npt.NDArray[np.int64]) -> tuple[Any, Any]:
    """The slow path: ``dataset[i]`` one by one, stacked."""
    pairs = [dataset[int(i)] for i in indices]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def sample_ids(dataset: WindowDataset) -> dict[float, int]:
    """Sample index by the id value of its window's first row."""
    return {float(dataset[i][0][0, 0]): i for i in range(len(dataset))}


def indices_of(
    batches: list[tuple[torch.Tensor, torch.Tensor]], ids: dict[float, int]
) -> list[int]:
    return [ids[float(v)] for x, _ in batches for v in x[:, 0, 0]]


def loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ticktensor-")]


def assert_no_loader_thread() -> None:
    gc.collect()
    assert loader_threads() == []


# -- torch compatibility ---------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [False, True])
def test_any_other_dataset_gives_torchs_batches(shuffle: bool) -> None:
    data = TensorDataset(torch.arange(50.0).reshape(25, 2), torch.arange(25))
    ours = DataLoader(
        data, batch_size=4, shuffle=shuffle, generator=torch.Generator().manual_seed(3)
    )
    theirs = torch.utils.data.DataLoader(
        data, batch_size=4, shuffle=shuffle, generator=torch.Generator().manual_seed(3)
    )
    assert not ours.fast
    assert len(ours) == len(theirs)
    for _ in range(2):  # a second epoch continues the generator, as torch does
        got, want = list(ours), list(theirs)
        assert len(got) == len(want) == 7
        for a, b in zip(got, want, strict=True):
            assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert ours.sampler.__class__ is theirs.sampler.__class__  # torch attributes delegate


def test_package_exports_dataloader_lazily() -> None:
    assert ticktensor.DataLoader is DataLoader
    with pytest.raises(AttributeError):
        _ = ticktensor.NoSuchThing  # type: ignore[attr-defined]


def test_per_sample_hooks_take_torchs_path(dataset: WindowDataset) -> None:
    with pytest.warns(SlowPathWarning, match=r"collate_fn=len .* use batch_transform="):
        loader = DataLoader(dataset, batch_size=8, collate_fn=len)
    assert not loader.fast
    assert list(loader)[:2] == [8, 8]


def test_fast_only_options_are_rejected_on_torchs_path() -> None:
    with pytest.raises(ConfigError, match=r"applies to the fast path only.*no window dataset"):
        DataLoader([1, 2, 3], fast=FastOptions(order=SequentialOrder(), seed=1))


# -- the fast path against the slow reference ----------------------------------------------


@pytest.mark.parametrize("order", [SequentialOrder(), UniformOrder(5)])
def test_fast_path_equals_reference(dataset: WindowDataset, order: Any) -> None:
    loader = DataLoader(dataset, batch_size=32, fast=FastOptions(order=order, prefetch=2))
    assert loader.fast
    batches = list(loader)
    expected = order.order(dataset, 0)
    assert len(batches) == len(loader) == 7  # 195 samples: 6 full batches and one of 3
    assert [x.shape[0] for x, _ in batches] == [32] * 6 + [3]
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    want_x, want_y = reference(dataset, expected)
    assert x.dtype == torch.float32
    assert y.dtype == torch.float32
    assert torch.equal(x, want_x)
    assert torch.equal(y, want_y)


def test_shuffle_and_generator_choose_the_default_order(dataset: WindowDataset) -> None:
    assert DataLoader(dataset, batch_size=8).order == SequentialOrder()
    assert DataLoader(dataset, batch_size=8, shuffle=True).order == UniformOrder(0)
    seeded = DataLoader(
        dataset, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(9)
    )
    assert seeded.order == UniformOrder(9)
    assert DataLoader(
        dataset, batch_size=8, shuffle=True, fast=FastOptions(seed=4)
    ).order == UniformOrder(4)


def test_kept_batches_stay_correct(dataset: WindowDataset) -> None:
    """``list(loader)`` keeps every batch: no buffer may be refilled under it."""
    loader = DataLoader(dataset, batch_size=8, shuffle=True, fast=FastOptions(prefetch=1))
    kept = list(loader)
    want_x, want_y = reference(dataset, UniformOrder(0).order(dataset, 0))
    assert torch.equal(torch.cat([b[0] for b in kept]), want_x)
    assert torch.equal(torch.cat([b[1] for b in kept]), want_y)
    # Views and numpy arrays of a batch also hold its buffer.
    views = [
        (x[1:3], y.numpy())
        for x, y in DataLoader(dataset, batch_size=8, shuffle=True, fast=FastOptions(seed=2))
    ]
    order = UniformOrder(2).order(dataset, 0)
    for k, (x, y) in enumerate(views):
        want = reference(dataset, order[8 * k : 8 * k + 8])
        assert torch.equal(x, want[0][1:3])
        assert np.array_equal(y, want[1].numpy())


def test_dropped_batches_reuse_buffers(dataset: WindowDataset) -> None:
    loader = DataLoader(dataset, batch_size=8, fast=FastOptions(prefetch=2))
    count = sum(1 for _ in loader)
    assert count == 25
    assert loader.stats()["buffers_allocated"] <= 5  # queued 2, filling 1, consumer 2


def test_pin_memory_without_cuda_is_a_no_op(dataset: WindowDataset) -> None:
    loader = DataLoader(dataset, batch_size=16, pin_memory=True)
    x, _ = next(iter(loader))
    assert loader.pin_memory is True  # torch's attribute: what was asked for
    assert loader.stats()["memory"] == (
        "pinned" if torch.cuda.is_available() else "pageable (no CUDA)"
    )
    assert x.is_pinned() is torch.cuda.is_available()
    if not torch.cuda.is_available():
        assert x.data_ptr() % 4096 == 0  # ordinary buffers are page-aligned


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_copies_match(dataset: WindowDataset) -> None:  # pragma: no cover - GPU only
    loader = DataLoader(dataset, batch_size=16, shuffle=True, fast=FastOptions(device="cuda"))
    got = [(x.cpu(), y.cpu()) for x, y in loader]
    want = reference(dataset, UniformOrder(0).order(dataset, 0))
    assert torch.equal(torch.cat([g[0] for g in got]), want[0])


def test_drop_last_and_pad(dataset: WindowDataset) -> None:
    assert len(DataLoader(dataset, batch_size=32, drop_last=True)) == 6
    padded = list(DataLoader(dataset, batch_size=32, fast=FastOptions(pad=True)))
    assert [x.shape[0] for x, _ in padded] == [32] * 7
    assert torch.equal(padded[-1][0][3:], reference(dataset, np.arange(29))[0])  # wrapped


def test_ranks_split_each_global_step(dataset: WindowDataset) -> None:
    """195 samples over 3 ranks of 10: six whole steps of 30, then the last 15 split 5 each."""
    ids = sample_ids(dataset)
    per_rank = [
        indices_of(
            list(
                DataLoader(
                    dataset, batch_size=10, shuffle=True, fast=FastOptions(rank=r, world_size=3)
                )
            ),
            ids,
        )
        for r in range(3)
    ]
    order = UniformOrder(0).order(dataset, 0)
    assert [len(p) for p in per_rank] == [65, 65, 65]  # 195 / 3: nothing to pad
    for r in range(3):
        for step in range(6):
            positions = np.arange(step * 30 + r * 10, step * 30 + r * 10 + 10)
            assert per_rank[r][step * 10 : step * 10 + 10] == order[positions].tolist()
        assert per_rank[r][60:] == order[180 + 5 * r : 185 + 5 * r].tolist()


def test_whole_step_padding_fills_every_batch(dataset: WindowDataset) -> None:
    ids = sample_ids(dataset)
    per_rank = [
        indices_of(
            list(
                DataLoader(
                    dataset,
                    batch_size=10,
                    shuffle=True,
                    fast=FastOptions(rank=r, world_size=3, pad="steps"),
                )
            ),
            ids,
        )
        for r in range(3)
    ]
    order = UniformOrder(0).order(dataset, 0)
    assert [len(p) for p in per_rank] == [70, 70, 70]  # 7 padded batches on every rank
    for r in range(3):
        for step in range(7):
            positions = np.arange(step * 30 + r * 10, step * 30 + r * 10 + 10) % len(order)
            assert per_rank[r][step * 10 : step * 10 + 10] == order[positions].tolist()


def test_epochs_reshuffle_and_set_epoch(dataset: WindowDataset) -> None:
    ids = sample_ids(dataset)
    loader = DataLoader(dataset, batch_size=50, shuffle=True)
    first, second = indices_of(list(loader), ids), indices_of(list(loader), ids)
    assert first == UniformOrder(0).order(dataset, 0).tolist()
    assert second == UniformOrder(0).order(dataset, 1).tolist()
    loader.set_epoch(7)
    assert indices_of(list(loader), ids) == UniformOrder(0).order(dataset, 7).tolist()
    assert loader.epoch == 8


# -- state and resume ------------------------------------------------------------------------


@pytest.mark.parametrize(("saved_world", "new_world"), [(1, 1), (2, 2), (2, 3), (3, 1)])
def test_resume_mid_epoch_yields_exactly_the_rest(
    dataset: WindowDataset, saved_world: int, new_world: int
) -> None:
    ids = sample_ids(dataset)
    order = UniformOrder(0).order(dataset, 0)
    states = []
    seen: list[int] = []
    for r in range(saved_world):
        loader = DataLoader(
            dataset,
            batch_size=8,
            shuffle=True,
            fast=FastOptions(rank=r, world_size=saved_world, pad=False),
        )
        iterator = iter(loader)
        seen += indices_of([next(iterator) for _ in range(3)], ids)
        states.append(loader.state_dict())
        del iterator
    assert all(s == states[0] for s in states)
    assert states[0] == {"epoch": 0, "seed": 0, "samples_consumed": 3 * 8 * saved_world}
    rest: list[int] = []
    for r in range(new_world):
        loader = DataLoader(
            dataset,
            batch_size=8,
            shuffle=True,
            fast=FastOptions(rank=r, world_size=new_world, pad=False),
        )
        loader.set_epoch(0)  # the usual loop head keeps the restored position
        loader.load_state_dict(states[0])
        loader.set_epoch(0)
        rest += indices_of(list(loader), ids)
        assert loader.state_dict() == {"epoch": 1, "seed": 0, "samples_consumed": 0}
    assert sorted(seen) == sorted(order[: len(seen)].tolist())
    assert sorted(rest) == sorted(order[len(seen) :].tolist())  # nothing repeated or skipped


def test_state_with_another_seed_is_refused(dataset: WindowDataset) -> None:
    loader = DataLoader(dataset, batch_size=8, shuffle=True, fast=FastOptions(seed=1))
    with pytest.raises(ConfigError, match="seed 2"):
        loader.load_state_dict({"epoch": 0, "seed": 2, "samples_consumed": 8})


def test_next_epoch_order_is_computed_ahead(dataset: WindowDataset) -> None:
    loader = DataLoader(dataset, batch_size=8, shuffle=True)
    ids = sample_ids(dataset)
    iterator = iter(loader)
    for _ in range(13):  # past the middle of the pass's 25 batches
        next(iterator)
    assert set(loader._orders._done) | set(loader._orders._running) == {0, 1}
    list(iterator)
    assert indices_of(list(loader), ids) == UniformOrder(0).order(dataset, 1).tolist()
    del loader, iterator
    assert_no_loader_thread()


def test_stats(dataset: WindowDataset) -> None:
    loader = DataLoader(dataset, batch_size=16)
    for _ in loader:
        pass
    stats = loader.stats()
    assert {
        "batches",
        "samples",
        "bytes",
        "wait_s",
        "assemble_s",
        "queue_depth",
        "first_batch_s",
    } <= set(stats)
    assert stats["batches"] == 13
    assert stats["samples"] == len(dataset)
    assert stats["bytes"] == len(dataset) * 4 * (WINDOW * 3 + 1)
    assert 0 < stats["first_batch_s"] < 5
    assert stats["assemble_s"] > 0


# -- shutdown, errors, timeout --------------------------------------------------------------


def test_break_leaves_no_thread(dataset: WindowDataset) -> None:
    loader = DataLoader(dataset, batch_size=4, fast=FastOptions(prefetch=3))
    for _ in loader:
        names = [t.name for t in loader_threads()]
        assert sum(n.startswith("ticktensor-loader-") for n in names) == 1, names
        assert all(n.startswith(("ticktensor-loader-", "ticktensor-chunk")) for n in names)
        break
    assert_no_loader_thread()


def test_deleting_the_loader_leaves_no_thread(dataset: WindowDataset) -> None:
    loader = DataLoader(dataset, batch_size=4)
    iterator = iter(loader)
    next(iterator)
    del loader, iterator
    assert_no_loader_thread()


def test_consumer_exception_leaves_no_thread(dataset: WindowDataset) -> None:
    def consume() -> None:
        for _ in DataLoader(dataset, batch_size=4):
            raise RuntimeError("the training step failed")

    with pytest.raises(RuntimeError, match="training step"):
        consume()
    assert_no_loader_thread()


class SlowDataset(WindowDataset):
    """Sleeps before each batch: lets the consumer block waiting for data."""

    delay = 0.3

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        gather = self.runtime.gather_batch

        def slow(*args: Any, **kwargs: Any) -> Any:  # what the loader calls
            time.sleep(self.delay)
            return gather(*args, **kwargs)

        self.runtime.gather_batch = slow  # type: ignore[method-assign]


class FailingDataset(WindowDataset):
    """Fails on the third batch, as a corrupt chunk would."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        gather = self.runtime.gather_batch

        def failing(*args: Any, **kwargs: Any) -> Any:  # what the loader calls
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls == 3:
                raise ValueError("chunk 17 is damaged")
            return gather(*args, **kwargs)

        self.runtime.gather_batch = failing  # type: ignore[method-assign]


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler during the test, whatever handler an earlier test's
    library left installed (a simulated interrupt goes to the handler in place)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_sigint")
def test_keyboard_interrupt_leaves_no_thread(version: StoreVersion) -> None:
    def consume() -> None:
        for _ in DataLoader(dataset, batch_size=4):
            raise KeyboardInterrupt

    dataset = WindowDataset(version, WINDOW)
    with pytest.raises(KeyboardInterrupt):
        consume()
    assert_no_loader_thread()
    # And while the consumer is blocked waiting for a batch. The first loader is collected
    # first: an interrupt that lands in a finalizer the collector runs is swallowed there.
    gc.collect()
    slow = SlowDataset(version, WINDOW)
    timer = threading.Timer(0.1, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        for _ in DataLoader(slow, batch_size=4):
            pass
    timer.join()
    assert_no_loader_thread()


def test_assembly_error_is_raised_in_the_consumer(version: StoreVersion) -> None:
    loader = DataLoader(FailingDataset(version, WINDOW), batch_size=4)
    iterator = iter(loader)
    got = [next(iterator), next(iterator)]
    with pytest.raises(ValueError, match="chunk 17 is damaged") as info:
        next(iterator)
    assert len(got) == 2
    with pytest.raises(StopIteration):  # the pass is over
        next(iterator)
    del iterator
    notes = "".join(getattr(info.value, "__notes__", []))
    assert "batch 2 (epoch 0, rank 0 of 1" in notes
    assert_no_loader_thread()


def test_timeout_names_the_batch(version: StoreVersion) -> None:
    loader = DataLoader(SlowDataset(version, WINDOW), batch_size=4, timeout=0.05)
    with pytest.raises(TimeoutError, match=r"batch 0 .*timeout of 0.05 s"):
        next(iter(loader))
    assert_no_loader_thread()


def test_the_iterator_names_the_samples_of_each_batch(dataset: WindowDataset) -> None:
    loader = DataLoader(dataset, batch_size=8, shuffle=True, fast=FastOptions(rank=1, world_size=2))
    iterator = iter(loader)
    assert iterator.indices is None  # type: ignore[attr-defined]
    for x, y in iterator:
        idx = iterator.indices  # type: ignore[attr-defined]
        want_x, want_y = reference(dataset, idx)
        assert torch.equal(x, want_x)
        assert torch.equal(y, want_y)


# -- the world is read when a pass starts -----------------------------------------------------


def test_rank_and_world_are_read_when_a_pass_starts(
    dataset: WindowDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    ids = sample_ids(dataset)
    loader = DataLoader(dataset, batch_size=8, shuffle=True)  # built before the launcher
    assert (loader.rank, loader.world_size) == (0, 1)
    whole = indices_of(list(loader), ids)
    loader.set_epoch(0)
    seen = []
    for rank in (0, 1):  # Lightning's launcher: LOCAL_RANK, NODE_RANK and WORLD_SIZE
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        monkeypatch.setenv("NODE_RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", "2")
        assert len(loader) == -(-len(dataset) // 16)
        seen.append(indices_of(list(loader), ids))
        loader.set_epoch(0)
    assert not set(seen[0]) & set(seen[1][: len(seen[1]) - 8])  # the last step pads
    assert set(seen[0]) | set(seen[1]) == set(whole)
    assert isinstance(loader.sampler, torch.utils.data.DistributedSampler)
    assert (loader.sampler.rank, loader.sampler.num_replicas) == (1, 2)
    monkeypatch.delenv("LOCAL_RANK")
    with pytest.raises(ConfigError, match="WORLD_SIZE=2 but this process's rank is unknown"):
        next(iter(loader))  # a pass learns its world at its first batch


def test_work_started_at_iter_is_redone_or_dropped(dataset: WindowDataset) -> None:
    """Batches are assembled from ``iter()`` on; a ``set_epoch`` before the first batch
    replaces that work, and closing the iterator before its first batch stops it."""
    ids = sample_ids(dataset)
    loader = DataLoader(dataset, batch_size=50, shuffle=True)
    it = iter(loader)
    deadline = time.monotonic() + 5
    while not loader_threads():  # the early pass's assembler
        assert time.monotonic() < deadline
        time.sleep(0.01)
    loader.set_epoch(3)
    assert indices_of(list(it), ids) == UniformOrder(0).order(dataset, 3).tolist()
    closed = iter(loader)
    closed.close()
    with pytest.raises(StopIteration):
        next(closed)
    deadline = time.monotonic() + 5
    while loader_threads():
        assert time.monotonic() < deadline, "the closed pass's thread outlived it"
        time.sleep(0.01)
    assert loader.state_dict() == {"epoch": 4, "seed": 0, "samples_consumed": 0}


def test_a_store_path_opens_the_store(tmp_path: Path) -> None:
    build_version(tmp_path / "store")
    opened = WindowDataset(open_store(str(tmp_path / "store")), WINDOW)
    for given in (str(tmp_path / "store"), tmp_path / "store"):
        by_path = WindowDataset(given, WINDOW)
        assert by_path.version.version == opened.version.version
        assert torch.equal(
            next(iter(DataLoader(by_path, batch_size=8)))[0],
            next(iter(DataLoader(opened, batch_size=8)))[0],
        )
    with pytest.raises(ConfigError, match=r"open_store\(url\)\) or a store's path or URL, got int"):
        WindowDataset(3, WINDOW)  # type: ignore[arg-type]


def test_worker_init_fn_is_announced_as_unused_not_as_a_slow_path(dataset: WindowDataset) -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        loader = DataLoader(dataset, batch_size=8, num_workers=2, worker_init_fn=lambda _: None)
        next(iter(loader))
    assert loader.fast
    assert [w.category for w in record] == [UserWarning]
    assert "worker_init_fn is never called" in str(record[0].message)


def test_concat_refuses_datasets_that_cannot_be_one(
    version: StoreVersion, dataset: WindowDataset
) -> None:
    with pytest.raises(ConfigError, match=r"part 1 differs from part 0 in window \(4 vs 5\)"):
        WindowDataset.concat([dataset, WindowDataset(version, WINDOW + 1)])
    with pytest.warns(SlowPathWarning, match="ConcatDataset .* cannot be joined"):
        loader = DataLoader(
            torch.utils.data.ConcatDataset([dataset, WindowDataset(version, WINDOW + 1)]),
            batch_size=4,
        )
    assert not loader.fast
