"""HuggingFace accelerate with the loader: prepare, skip_first_batches, save/load state, torchrun.

accelerate wraps only ``torch.utils.data.DataLoader`` (sub)classes in ``prepare()``; ours
comes back unchanged, places batches itself (``FastOptions(device=...)``) and registers
each pass with accelerate's gradient state, as accelerate's own loaders do, so that an
accumulation ends with the epoch and ``gather_for_metrics`` drops the last step's padding. Its
``skip_first_batches`` hands our loader to ``loader.skip_first_batches`` (the fast path,
ending the epoch); ``register_for_checkpointing`` saves what ``state_dict()`` returns.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import TensorDataset

from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, WindowDataset
from ticktensor.store import StoreVersion

from .conftest import ALL_IDS, BATCH, HERE, WINDOW, ids, read_ids, run_script

accelerate = pytest.importorskip("accelerate")


def reset_accelerate() -> None:
    """Forget accelerate's process-wide state, as a new process would start."""
    accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
    accelerate.state.GradientState._reset_state()


@pytest.fixture
def accelerator() -> Iterator[Any]:
    """An Accelerator on its default device (CUDA where there is one); accelerate's
    process-wide state is reset afterwards."""
    yield accelerate.Accelerator()
    reset_accelerate()


def loader(version: StoreVersion, **fast: Any) -> DataLoader:
    dataset = WindowDataset(version, WINDOW)
    return DataLoader(dataset, batch_size=BATCH, shuffle=True, fast=FastOptions(seed=5, **fast))


def batch_ids(batches: Any) -> list[list[int]]:
    return [ids(x) for x, _ in batches]


@pytest.mark.parametrize("device", ["given", "auto"])
def test_prepare_returns_the_loader_placing_batches_itself(
    version: StoreVersion, accelerator: Any, device: str
) -> None:
    # "auto": the device of the Accelerator created before the loader (on a CPU-only
    # machine both are the CPU; with CUDA this is where the two ways must agree).
    ours = loader(version, device=accelerator.device if device == "given" else "auto")
    assert accelerator.prepare(ours) is ours
    # accelerate may name the device without its index ("cuda" for "cuda:0").
    assert ours.device is not None
    assert ours.device.type == accelerator.device.type
    x, y = next(iter(ours))
    assert x.device.type == y.device.type == accelerator.device.type
    assert (x.shape, y.shape) == ((BATCH, WINDOW, 3), (BATCH, 1))


def test_skip_first_batches_yields_exactly_the_rest(
    version: StoreVersion, accelerator: Any
) -> None:
    ours, twin = loader(version), loader(version)
    ours.set_epoch(2)  # as after a resume: a later epoch's order
    twin.set_epoch(2)
    skipped = accelerator.skip_first_batches(ours, 3)
    assert len(skipped) == len(ours) - 3
    rest = batch_ids(skipped)
    expected = batch_ids(twin)
    assert len(expected) == len(ours)
    assert rest == expected[3:]


@pytest.mark.parametrize("resume_epoch", [0, 1])
def test_the_documented_resume_loop_equals_an_uninterrupted_run(
    version: StoreVersion, accelerator: Any, resume_epoch: int
) -> None:
    """accelerate's checkpointing guide: in the epoch of the checkpoint, skip the batches
    trained before it (``skip_first_batches``); then the plain loader, epoch after epoch."""
    epochs, resume_step = 3, 3
    whole = loader(version)
    uninterrupted = [batch_ids(whole) for _ in range(epochs)]

    ours = accelerator.prepare(loader(version))  # a new process's loader
    ours.set_epoch(resume_epoch)  # the epoch named by the checkpoint (0: nothing to set)
    trained = []
    for epoch in range(resume_epoch, epochs):
        if epoch == resume_epoch:
            active = accelerator.skip_first_batches(ours, resume_step)
            assert not isinstance(active, torch.utils.data.DataLoader)  # the fast path
            assert len(active) == len(ours) - resume_step
        else:
            active = ours
        trained.append(batch_ids(active))
    assert trained[0] == uninterrupted[resume_epoch][resume_step:]
    assert trained[1:] == uninterrupted[resume_epoch + 1 :]


def test_save_state_and_load_state_resume_mid_epoch(
    version: StoreVersion, accelerator: Any, tmp_path: Path
) -> None:
    ours = loader(version)
    accelerator.register_for_checkpointing(ours)
    batches = iter(ours)
    before = [ids(next(batches)[0]) for _ in range(3)]
    accelerator.save_state(str(tmp_path / "state"))
    after = batch_ids(batches)
    next_epoch = batch_ids(ours)

    # A new process: a new Accelerator and a new loader.
    reset_accelerate()
    fresh = accelerate.Accelerator()
    again = loader(version)
    fresh.register_for_checkpointing(again)
    fresh.load_state(str(tmp_path / "state"))
    assert batch_ids(again) == after
    assert batch_ids(again) == next_epoch  # then the next epoch, as uninterrupted
    assert sorted(i for b in before + after for i in b) == sorted(ALL_IDS)


def accumulation_syncs(loader: Any, epochs: int = 2) -> list[list[bool]]:
    """``accelerator.sync_gradients`` at each step of ``epochs`` epochs under
    ``gradient_accumulation_steps=3``, with the loader passed through ``prepare``."""
    reset_accelerate()
    accelerator = accelerate.Accelerator(gradient_accumulation_steps=3)
    model = torch.nn.Linear(WINDOW * 3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    syncs = []
    for _ in range(epochs):
        syncs.append([])
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x.flatten(1)), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                syncs[-1].append(accelerator.sync_gradients)
    reset_accelerate()
    return syncs


def test_gradient_accumulation_steps_at_the_end_of_each_epoch(version: StoreVersion) -> None:
    """With 8 batches and 3 steps per update, accelerate updates after batches 3, 6 and
    8 of every epoch with torch's loader; the same is expected with ours."""
    dataset = WindowDataset(version, WINDOW)
    samples = [dataset[i] for i in range(len(dataset))]
    tensors = TensorDataset(
        torch.stack([x for x, _ in samples]), torch.stack([y for _, y in samples])
    )
    theirs = accumulation_syncs(torch.utils.data.DataLoader(tensors, batch_size=BATCH))
    assert theirs == [[False, False, True, False, False, True, False, True]] * 2
    assert accumulation_syncs(loader(version)) == theirs


def test_a_pass_leaves_accelerates_gradient_state_when_it_ends(
    version: StoreVersion, accelerator: Any
) -> None:
    """Each pass registers with accelerate's GradientState (how accelerate learns where
    a loader ends) and leaves it when it ends, is broken off, or is dropped."""
    state = accelerate.state.GradientState()
    ours = accelerator.prepare(loader(version))
    assert not state.in_dataloader
    it = iter(ours)
    next(it)
    assert state.in_dataloader
    assert not state.end_of_dataloader
    for _ in range(len(ours) - 2):
        next(it)
    assert not state.end_of_dataloader
    next(it)  # the last batch
    assert state.end_of_dataloader
    assert state.remainder == 0  # 64 samples in steps of 8: no padding
    with pytest.raises(StopIteration):
        next(it)
    assert not state.in_dataloader
    for step, _ in enumerate(ours):
        if step == 2:
            break
    del _
    assert not state.in_dataloader


@pytest.fixture(scope="module")
def torchrun_run(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run ``_accelerate_torchrun.py`` under torchrun with 2 processes; its output folder."""
    out = tmp_path_factory.mktemp("accelerate-torchrun")
    run_script(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "--monitor-interval=0.5",
            str(HERE / "_accelerate_torchrun.py"),
            store_url,
            str(out),
        ]
    )
    return out


@pytest.mark.slow
def test_torchrun_two_processes_get_disjoint_complete_shards(torchrun_run: Path) -> None:
    orders = []
    for epoch in range(3):
        r0, r1 = (read_ids(torchrun_run / f"epoch{epoch}-rank{r}.txt") for r in range(2))
        assert (len(r0), len(r1)) == (len(ALL_IDS) // 2,) * 2, epoch
        assert not set(r0) & set(r1), f"epoch {epoch}: the ranks share samples"
        assert set(r0) | set(r1) == ALL_IDS
        orders.append(r0)
    assert len({tuple(o) for o in orders}) == 3, "an epoch repeats another's order"


@pytest.mark.slow
def test_torchrun_torch_views_of_a_rank(torchrun_run: Path) -> None:
    """``sampler`` is a ``DistributedSampler`` of this rank, ``len`` is per rank, and
    ``skip_first_batches`` skips within this rank's pass."""
    for rank in range(2):
        assert (torchrun_run / f"views-rank{rank}.txt").read_text() == "", rank
        skipped = read_ids(torchrun_run / f"skip1-rank{rank}.txt")
        assert skipped == read_ids(torchrun_run / f"epoch2-rank{rank}.txt")[BATCH:], rank


@pytest.mark.slow
def test_torchrun_gather_for_metrics_sees_each_sample_once(torchrun_run: Path) -> None:
    """57 samples over 2 ranks of 8: torch's loader under accelerate gathers 57 ids, the
    7 wrapped-around duplicates of the last step dropped."""
    expected = sorted(i for i in ALL_IDS if i < 2000)  # symbols S0 and S1
    assert len(expected) == 57
    assert sorted(read_ids(torchrun_run / "gathered.txt")) == expected
