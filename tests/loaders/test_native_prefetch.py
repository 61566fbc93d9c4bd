"""The native batch engine of the DataLoader: same batches as the Python thread, hand-over
mid-pass, kept batches, errors, threads and fork."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.native.test_sample_prefetcher import os_threads, wait_for_child, wait_until
from ticktensor.loaders import FastOptions, SequentialOrder, UniformOrder, WindowDataset
from ticktensor.loaders._native_prefetch import NativePrefetcher, Relay
from ticktensor.loaders._prefetch import Prefetcher
from ticktensor.loaders.dataloader import DataLoader
from ticktensor.loaders.sharding import ShardPlan
from ticktensor.store import StoreVersion

from .test_dataloader import WINDOW, build_version

Batch = tuple[torch.Tensor, torch.Tensor]


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> StoreVersion:
    return build_version(tmp_path_factory.mktemp("native") / "store")


@pytest.fixture(scope="module")
def warm(version: StoreVersion) -> WindowDataset:
    """A dataset whose every chunk is loaded: its passes start on the native engine."""
    dataset = WindowDataset(version, WINDOW, threads=2)
    for _ in DataLoader(dataset, batch_size=64):
        pass
    assert dataset.cache.complete
    return dataset


def one_rank(order: int | npt.ArrayLike, batch_size: int, start_sample: int = 0) -> ShardPlan:
    """The plan of a loader of one rank (which does not pad its last batch by default)."""
    return ShardPlan(order, batch_size, pad=False, start_sample=start_sample)


def expected_batches(dataset: WindowDataset, plan: ShardPlan) -> list[Batch]:
    """The plan's batches, each gathered on its own by ``dataset.get_batch``."""
    out = []
    for step in range(plan.num_steps):
        x, y = dataset.get_batch(plan.batch(step))
        out.append((torch.from_numpy(x), torch.from_numpy(y)))
    return out


def assert_same_batches(got: list[Batch], want: list[Batch]) -> None:
    assert len(got) == len(want)
    for step, ((x, y), (want_x, want_y)) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(x, want_x), f"batch {step}: features differ"
        assert torch.equal(y, want_y), f"batch {step}: labels differ"


def copied(batch: Batch) -> Batch:
    """A copy of a batch, so that the loader's buffer can go at once."""
    x, y = batch
    return x.clone(), y.clone()


def copies(iterator: Iterator[Batch]) -> list[Batch]:
    """Every batch, copied."""
    return [copied(batch) for batch in iterator]


# -- the plan as (first, count) ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 80),
    batch_size=st.integers(1, 12),
    world_rank=st.integers(1, 4).flatmap(lambda w: st.tuples(st.just(w), st.integers(0, w - 1))),
    drop_last=st.booleans(),
    pad=st.booleans(),
    start_fraction=st.floats(0, 1),
    seed=st.integers(0, 2**16),
)
def test_step_ranges_give_each_steps_batch(
    n: int,
    batch_size: int,
    world_rank: tuple[int, int],
    drop_last: bool,
    pad: bool,
    start_fraction: float,
    seed: int,
) -> None:
    world_size, rank = world_rank
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    start = int(start_fraction * n)
    plan = ShardPlan(order, batch_size, world_size, rank, drop_last, pad, start_sample=start)
    first, count = plan.step_ranges()
    assert first.dtype == count.dtype == np.int64
    assert first.shape == count.shape == (plan.num_steps,)
    assert (first >= 0).all()  # what the native thread accepts
    assert ((count >= 0) & (count <= batch_size)).all()
    for step in range(plan.num_steps):
        positions = [(int(first[step]) + j) % n for j in range(int(count[step]))]
        assert order[positions].tolist() == plan.batch(step).tolist(), step


# -- the native engine against the Python one and the reference ----------------------------------

CONFIGS = [
    # batch_size, world_size, drop_last, pad, shuffle
    pytest.param(32, 1, False, False, False, id="short-last-batch"),
    pytest.param(32, 1, True, False, True, id="drop-last"),
    pytest.param(32, 1, False, True, True, id="pad-wraps"),
    pytest.param(10, 3, False, True, True, id="3-ranks-pad"),
    pytest.param(7, 3, False, False, True, id="3-ranks-short-tail"),
    pytest.param(10, 3, True, False, False, id="3-ranks-drop-last"),
    pytest.param(97, 2, False, False, True, id="2-ranks-empty-last-batch"),
    pytest.param(97, 3, False, True, True, id="3-ranks-one-step-past-the-end"),
    pytest.param(400, 1, False, True, False, id="pad-wraps-twice"),
    pytest.param(500, 1, True, False, False, id="no-steps"),
]


def loader_for(dataset: WindowDataset, native: bool, **options: Any) -> DataLoader:
    """A loader on the native engine (or the Python one); FastOptions fields go there."""
    fields = {"rank", "world_size", "pad", "order", "seed"}
    fast = {name: options.pop(name) for name in list(options) if name in fields}
    engine = "auto" if native else "python"
    return DataLoader(dataset, **options, fast=FastOptions(engine=engine, **fast))


@pytest.mark.parametrize(("batch_size", "world_size", "drop_last", "pad", "shuffle"), CONFIGS)
def test_native_batches_equal_python_batches_and_the_reference(
    warm: WindowDataset,
    batch_size: int,
    world_size: int,
    drop_last: bool,
    pad: bool,
    shuffle: bool,
) -> None:
    order = (UniformOrder(0) if shuffle else SequentialOrder()).order(warm, 0)
    for rank in range(world_size):
        options = {
            "batch_size": batch_size,
            "shuffle": shuffle,
            "rank": rank,
            "world_size": world_size,
            "drop_last": drop_last,
            "pad": pad,
        }
        plan = ShardPlan(order, batch_size, world_size, rank, drop_last, pad)
        want = expected_batches(warm, plan)
        native_loader = loader_for(warm, True, **options)
        native_iterator = iter(native_loader)
        assert isinstance(native_loader._last(), NativePrefetcher)  # type: ignore[misc]
        native = copies(native_iterator)
        python_loader = loader_for(warm, False, **options)
        python_iterator = iter(python_loader)
        assert isinstance(python_loader._last(), Prefetcher)  # type: ignore[misc]
        python = copies(python_iterator)
        assert len(native) == len(native_loader) == plan.num_steps
        assert_same_batches(native, python)
        assert_same_batches(native, want)
        assert native_loader.state_dict() == {"epoch": 1, "seed": 0, "samples_consumed": 0}


@pytest.mark.parametrize("world_size", [1, 3])
def test_resumed_native_pass_yields_the_rest_of_the_epoch(
    warm: WindowDataset, world_size: int
) -> None:
    order = UniformOrder(0).order(warm, 0)
    for rank in range(world_size):
        pad = False  # the loader pads as DistributedSampler does: 195 samples need none
        options = {"batch_size": 8, "shuffle": True, "rank": rank, "world_size": world_size}
        first = loader_for(warm, True, **options)
        iterator = iter(first)
        for _ in range(3):
            next(iterator)
        state = first.state_dict()
        del iterator
        assert state["samples_consumed"] == 3 * 8 * world_size
        start = state["samples_consumed"]
        plan = ShardPlan(order, 8, world_size, rank, pad=pad, start_sample=start)
        got = {}
        for native in (True, False):
            loader = loader_for(warm, native, **options)
            loader.load_state_dict(state)
            got[native] = copies(iter(loader))
        assert_same_batches(got[True], got[False])
        assert_same_batches(got[True], expected_batches(warm, plan))


# -- hand-over from the Python thread, kept batches -----------------------------------------------


@pytest.mark.parametrize("keep", [False, True], ids=["drop", "keep"])
def test_a_pass_over_a_fresh_dataset_hands_over_to_the_native_thread(
    version: StoreVersion, warm: WindowDataset, keep: bool
) -> None:
    fresh = WindowDataset(version, WINDOW, threads=2)
    assert not fresh.cache.complete
    loader = DataLoader(fresh, batch_size=8, shuffle=True, fast=FastOptions(prefetch=2))
    want = expected_batches(warm, one_rank(UniformOrder(0).order(warm, 0), 8))
    iterator = iter(loader)
    relay = loader._last()  # type: ignore[misc]
    assert isinstance(relay, Relay)
    engines, got = [], []
    for x, y in iterator:
        got.append((x, y) if keep else (x.clone(), y.clone()))
        engines.append(relay.engine)
    assert fresh.cache.complete
    assert engines[0] == "python"
    assert engines[-1] == "native", engines
    assert engines == sorted(engines, key=["python", "native"].index)  # one hand-over
    assert loader._last() is relay  # type: ignore[misc]
    assert_same_batches(got, want)  # kept batches checked only now: none was overwritten
    stats = loader.stats()
    assert stats["batches"] == len(want)
    assert stats["samples"] == len(fresh)
    if not keep:
        assert stats["buffers_allocated"] <= loader.prefetch + 3


def test_kept_batches_stay_correct_on_the_native_engine(warm: WindowDataset) -> None:
    loader = DataLoader(warm, batch_size=8, shuffle=True, fast=FastOptions(prefetch=1))
    iterator = iter(loader)
    assert isinstance(loader._last(), NativePrefetcher)  # type: ignore[misc]
    kept = list(iterator)  # every buffer stays with the consumer
    assert_same_batches(kept, expected_batches(warm, one_rank(UniformOrder(0).order(warm, 0), 8)))
    stats = loader._last_stats
    assert stats is not None
    assert stats.slots_given_away > 0  # the ring ran out and buffers went to the consumer


def test_some_kept_batches_stay_correct_while_others_are_recycled(warm: WindowDataset) -> None:
    loader = DataLoader(warm, batch_size=4, shuffle=True, fast=FastOptions(seed=3, prefetch=2))
    want = expected_batches(warm, one_rank(UniformOrder(3).order(warm, 0), 4))
    kept: dict[int, Batch] = {}
    views: dict[int, npt.NDArray[np.float32]] = {}
    for step, (x, y) in enumerate(loader):
        assert torch.equal(x, want[step][0])
        if step % 3 == 0:
            kept[step] = (x, y)
        elif step % 3 == 1:
            views[step] = y.numpy()[1:]  # a view holds the buffer too
    for step, (x, y) in kept.items():
        assert torch.equal(x, want[step][0]), step
        assert torch.equal(y, want[step][1]), step
    for step, view in views.items():
        assert np.array_equal(view, want[step][1].numpy()[1:]), step


# -- errors, threads, fork ------------------------------------------------------------------------


def test_a_gather_error_in_the_native_thread_names_the_batch(version: StoreVersion) -> None:
    dataset = WindowDataset(version, WINDOW, threads=2)
    want = expected_batches(dataset, one_rank(len(dataset), 8))  # loads every chunk
    assert dataset.cache.complete
    plan = one_rank(len(dataset), 8)
    read_before: set[int] = set()
    bad_step = bad_chunk = -1
    for step in range(plan.num_steps):  # a chunk that batch `step` (>= 3) is the first to read
        chunks = set(dataset.chunks_of(plan.batch(step)).tolist())
        if step >= 3 and chunks - read_before:
            bad_step, bad_chunk = step, min(chunks - read_before)
            break
        read_before |= chunks
    assert bad_step >= 3
    before = os_threads()
    dataset.runtime.gather.clear(bad_chunk)  # the cache still counts it as loaded
    iterator = iter(DataLoader(dataset, batch_size=8))
    got = [copied(next(iterator)) for _ in range(bad_step)]
    with pytest.raises(RuntimeError, match="is not loaded") as info:
        next(iterator)
    assert_same_batches(got, want[:bad_step])
    notes = "".join(getattr(info.value, "__notes__", []))
    assert f"while assembling batch {bad_step} (epoch 0, rank 0 of 1" in notes
    assert "native thread" in notes
    with pytest.raises(StopIteration):
        next(iterator)
    assert wait_until(lambda: os_threads() <= before), os_threads() - before


def test_breaking_out_leaves_no_thread(warm: WindowDataset) -> None:
    gc.collect()
    before = os_threads()
    loader = DataLoader(warm, batch_size=4, fast=FastOptions(prefetch=3))
    started: set[int] = set()
    for step, _ in enumerate(loader):
        if step == 0:
            started = os_threads() - before
        if step == 2:
            break
    # The native thread (and maybe the short-lived thread that computed the order).
    assert 1 <= len(started) <= 2, started
    assert wait_until(lambda: not started & os_threads())


def test_breaking_out_after_the_hand_over_leaves_no_thread(version: StoreVersion) -> None:
    fresh = WindowDataset(version, WINDOW, threads=2)
    gc.collect()
    before = os_threads()  # the dataset's gather pool is running already
    loader = DataLoader(fresh, batch_size=4, shuffle=True)
    iterator = iter(loader)
    relay = loader._last()  # type: ignore[misc]
    assert isinstance(relay, Relay)
    for _ in range(len(loader) // 2):
        next(iterator)
        if relay.engine == "native":
            break
    assert relay.engine == "native"
    next(iterator)
    started = os_threads() - before  # the native thread, and loading threads of the pass
    assert started
    del iterator, relay
    assert wait_until(lambda: not started & os_threads()), started & os_threads()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_an_error_from_an_inherited_iterator_and_can_start_anew(
    warm: WindowDataset,
) -> None:
    loader = DataLoader(warm, batch_size=8, fast=FastOptions(prefetch=2))
    iterator = iter(loader)
    next(iterator)
    native = loader._last()  # type: ignore[misc]
    assert isinstance(native, NativePrefetcher)
    assert wait_until(lambda: native.queue_depth == 2)  # busy ahead of the consumer
    # A fresh pass in the child starts the epoch from its beginning, as every iter() does.
    want = expected_batches(warm, one_rank(len(warm), 8, start_sample=0))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            signal.alarm(10)  # a hang kills the child, which the parent reports
            try:
                next(iterator)
                code = 3
            except RuntimeError as error:
                code = 0 if "cannot go on in the child" in str(error) else 4
            if code == 0:
                fresh = copies(iter(loader))
                same = len(fresh) == len(want) and all(
                    torch.equal(x, wx) and torch.equal(y, wy)
                    for (x, y), (wx, wy) in zip(fresh, want, strict=True)
                )
                code = 0 if same else 5
        finally:
            os._exit(code)
    status = wait_for_child(pid, seconds=30)
    assert status == 0, {
        1: "the child raised something else",
        3: "next() on the inherited iterator returned a batch",
        4: "next() on the inherited iterator raised another RuntimeError",
        5: "a fresh iter(loader) in the child gave wrong batches",
    }.get(status, f"the child ended with status {status} (-14: it hung until its 10 s alarm)")
    assert_same_batches(copies(iterator), want[1:])  # the parent's pass goes on
