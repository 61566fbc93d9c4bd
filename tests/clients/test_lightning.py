"""PyTorch Lightning drives the loader: epochs, validation, sharding under DDP, resume.

Lightning stops a pass after ``len(loader)`` batches without asking for one more, runs
two validation batches before training (the sanity check), calls
``loader.sampler.set_epoch(epoch)`` at the start of every epoch and saves the state of
loaders that have ``state_dict``. What the model sees is recorded by sample id (see
``conftest``) and compared with what a plain loop over an identical loader yields.
"""

from __future__ import annotations

import itertools
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, WindowDataset
from ticktensor.store import StoreVersion

from .conftest import ALL_IDS, BATCH, HERE, WINDOW, ids, read_ids, run_script

pl = pytest.importorskip("lightning.pytorch")

pytestmark = pytest.mark.filterwarnings(
    # Lightning 2.6 flattens loaders with a torch pytree API that torch 2.13 deprecates.
    r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"
)
# Lightning's advice for a loader without worker processes: ours has none by design.
NO_WORKERS = pytest.mark.filterwarnings("ignore:The '.*_dataloader' does not have many workers")
Batches = list[list[int]]


class Recorder(pl.LightningModule):  # type: ignore[misc]
    """A linear model that records the ids of every batch it trains on."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(WINDOW * 3, 1)
        self.train_batches: dict[int, Batches] = {}  # by training epoch

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        assert (x.dtype, x.shape[1:]) == (torch.float32, (WINDOW, 3))
        assert (y.dtype, y.shape) == (torch.float32, (x.shape[0], 1))
        self.train_batches.setdefault(self.current_epoch, []).append(ids(x))
        return torch.nn.functional.mse_loss(self.layer(x.flatten(1)), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Validated(Recorder):
    """Also records the ids of every batch it validates on."""

    def __init__(self) -> None:
        super().__init__()
        self.val_batches: list[Batches] = []  # per validation run, sanity check first

    def on_validation_epoch_start(self) -> None:
        self.val_batches.append([])

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        self.val_batches[-1].append(ids(batch[0]))


def trainer(**options: Any) -> Any:
    defaults: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "logger": False,
        "enable_checkpointing": False,
        "log_every_n_steps": 1,
    }
    return pl.Trainer(**(defaults | options))


def train_loader(version: StoreVersion) -> DataLoader:
    return DataLoader(
        WindowDataset(version, WINDOW), batch_size=BATCH, shuffle=True, fast=FastOptions(seed=7)
    )


def val_loader(version: StoreVersion) -> DataLoader:
    return DataLoader(WindowDataset(version, WINDOW), batch_size=BATCH, shuffle=False)


def flat(batches: Batches) -> list[int]:
    return [i for batch in batches for i in batch]


@NO_WORKERS
def test_every_epoch_trains_and_validates_on_everything(version: StoreVersion) -> None:
    loader, val = train_loader(version), val_loader(version)
    n = len(loader)
    assert n == len(ALL_IDS) // BATCH
    model = Validated()
    fit = trainer(max_epochs=4)
    fit.fit(model, train_dataloaders=loader, val_dataloaders=val)

    counts = {epoch: len(batches) for epoch, batches in model.train_batches.items()}
    assert fit.global_step == 4 * n, counts
    assert counts == dict.fromkeys(range(4), n)
    orders = [flat(model.train_batches[epoch]) for epoch in range(4)]
    for order in orders:
        assert sorted(order) == sorted(ALL_IDS)  # every sample once
    assert len({tuple(o) for o in orders}) == 4, "every epoch has its own order"
    # Lightning's epoch e is the loader's epoch e: the order a plain loop gets.
    plain = train_loader(version)
    assert orders == [[i for x, _ in plain for i in ids(x)] for _ in range(4)]

    sanity, *validations = model.val_batches
    assert len(sanity) == 2  # num_sanity_val_steps
    assert len(validations) == 4
    sequential = sorted(ALL_IDS)  # the windows in store order
    for run in validations:
        assert flat(run) == sequential  # the sanity check left no mark


@NO_WORKERS
def test_limited_epochs_start_fresh_and_reshuffle(version: StoreVersion) -> None:
    loader = train_loader(version)
    model = Recorder()
    trainer(max_epochs=3, limit_train_batches=5).fit(model, loader)

    assert {e: len(batches) for e, batches in model.train_batches.items()} == {0: 5, 1: 5, 2: 5}
    expected = {}
    plain = train_loader(version)
    for epoch in range(3):
        plain.set_epoch(epoch)
        expected[epoch] = [ids(x) for x, _ in itertools.islice(plain, 5)]
    assert model.train_batches == expected  # each epoch from its beginning, in its order
    firsts = [tuple(batches[0]) for batches in model.train_batches.values()]
    assert len(set(firsts)) == 3


@NO_WORKERS
@pytest.mark.filterwarnings(
    # Lightning's notice when a checkpoint was taken mid-epoch; the loader's state is exact.
    "ignore:You're resuming from a checkpoint that ended before the epoch ended"
)
# The resumed run checkpoints into the same folder, as a resumed job does.
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
@pytest.mark.parametrize("step", [2, 7])  # after batch 2 of 8; after the last batch
def test_mid_epoch_checkpoint_resumes_exactly(
    version: StoreVersion, tmp_path: Path, step: int
) -> None:
    every = BATCH + step + 1  # the first checkpoint: after batch `step` of epoch 1

    def checkpointing() -> Any:  # the same callback when saving and when resuming
        saving = pl.callbacks.ModelCheckpoint(tmp_path, every_n_train_steps=every, save_top_k=-1)
        return trainer(max_epochs=3, enable_checkpointing=True, callbacks=[saving])

    whole = Recorder()
    checkpointing().fit(whole, train_loader(version))
    ckpt = tmp_path / f"epoch=1-step={every}.ckpt"
    assert ckpt.exists(), {e: len(b) for e, b in whole.train_batches.items()}

    resumed = Recorder()
    checkpointing().fit(resumed, train_loader(version), ckpt_path=str(ckpt))
    # Batches 0..step of epoch 1 were trained before the checkpoint; the rest follow it.
    expected = {1: whole.train_batches[1][step + 1 :], 2: whole.train_batches[2]}
    assert resumed.train_batches == {e: b for e, b in expected.items() if b}


# -- DDP: two processes on the CPU (gloo), launched by Lightning itself --------------------


@pytest.fixture(scope="module")
def ddp_run(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run ``_lightning_ddp.py`` once (all its fits); its output folder."""
    out = tmp_path_factory.mktemp("lightning-ddp")
    run_script([sys.executable, str(HERE / "_lightning_ddp.py"), store_url, str(out)])
    return out


def ddp_order(version: StoreVersion, rank: int, epoch: int) -> list[int]:
    """The ids of ``rank``'s pass of ``epoch`` (of 2 ranks), from a loader told its rank."""
    ours = DataLoader(
        WindowDataset(version, WINDOW),
        batch_size=BATCH,
        shuffle=True,
        fast=FastOptions(seed=3, rank=rank, world_size=2),  # seed as in _lightning_ddp.py
    )
    ours.set_epoch(epoch)
    return [i for x, _ in ours for i in ids(x)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["datamodule", "before_fit"])
def test_ddp_ranks_get_disjoint_complete_shards(
    ddp_run: Path, version: StoreVersion, mode: str
) -> None:
    orders = []
    for epoch in range(2):
        r0, r1 = (read_ids(ddp_run / mode / f"epoch{epoch}-rank{r}.txt") for r in range(2))
        assert (len(r0), len(r1)) == (len(ALL_IDS) // 2,) * 2, epoch  # 4 batches of 8 each
        assert not set(r0) & set(r1), f"epoch {epoch}: the ranks trained on the same samples"
        assert set(r0) | set(r1) == ALL_IDS
        # Rank r's slice of every global step: what a loader told its rank yields.
        assert [r0, r1] == [ddp_order(version, r, epoch) for r in range(2)], epoch
        orders.append(r0)
    assert orders[0] != orders[1], "epoch 1 repeats epoch 0's order"


@pytest.mark.slow
def test_ddp_limited_epochs_follow_lightnings_set_epoch(
    ddp_run: Path, version: StoreVersion
) -> None:
    for epoch in range(2):
        for rank in range(2):
            seen = read_ids(ddp_run / "limited" / f"epoch{epoch}-rank{rank}.txt")
            assert seen == ddp_order(version, rank, epoch)[: 2 * BATCH], (epoch, rank)


@pytest.mark.slow
def test_ddp_resumes_every_rank_from_rank_zeros_checkpoint(ddp_run: Path) -> None:
    # The checkpoint holds rank 0's loader state; both ranks continue after batch 1.
    assert (ddp_run / "mid.ckpt").exists(), "no checkpoint: epoch 1 had no batch 1"
    rest = (1 + 1) * BATCH
    for rank in range(2):
        whole = read_ids(ddp_run / "before_fit" / f"epoch1-rank{rank}.txt")
        resumed = read_ids(ddp_run / "resumed" / f"epoch1-rank{rank}.txt")
        assert resumed == whole[rest:], rank


@pytest.mark.slow
def test_ddp_spawn_pickles_the_loader_into_each_rank(
    store_url: str, version: StoreVersion, tmp_path: Path
) -> None:
    """``strategy="ddp_spawn"`` pickles the loader built in the main process into each
    spawned rank: there it rebuilds its engine and reads its own shard of every epoch."""
    run_script([sys.executable, str(HERE / "_lightning_ddp_spawn.py"), store_url, str(tmp_path)])
    for epoch in range(2):
        shards = [read_ids(tmp_path / f"epoch{epoch}-rank{r}.txt") for r in range(2)]
        assert not set(shards[0]) & set(shards[1]), epoch
        assert set(shards[0]) | set(shards[1]) == ALL_IDS
        assert shards == [ddp_order(version, r, epoch) for r in range(2)], epoch


@NO_WORKERS
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
@pytest.mark.parametrize("limit", [None, 0.5])
def test_end_of_epoch_checkpoint_resumes_with_the_next_epoch(
    version: StoreVersion, tmp_path: Path, limit: float | None
) -> None:
    """Train 2 epochs saving each epoch's end, resume the ``epoch=1`` checkpoint up to 4:
    epochs 2 and 3 are an uninterrupted run's (Lightning calls ``iter(loader)``, then
    ``sampler.set_epoch(2)``, then ``next()``)."""

    def fit(max_epochs: int, ckpt: Path | None = None) -> Recorder:
        model = Recorder()
        saving = pl.callbacks.ModelCheckpoint(tmp_path, every_n_epochs=1, save_top_k=-1)
        trainer(
            max_epochs=max_epochs,
            enable_checkpointing=True,
            callbacks=[saving],
            limit_train_batches=limit,
        ).fit(model, train_loader(version), ckpt_path=None if ckpt is None else str(ckpt))
        return model

    whole = Recorder()
    trainer(max_epochs=4, limit_train_batches=limit).fit(whole, train_loader(version))
    fit(2)
    (ckpt,) = tmp_path.glob("epoch=1-*.ckpt")
    resumed = fit(4, ckpt)
    assert resumed.train_batches == {e: whole.train_batches[e] for e in (2, 3)}
    assert whole.train_batches[2] != whole.train_batches[0]


@pytest.mark.slow
def test_ddp_validate_and_predict_see_torchs_samples(ddp_run: Path) -> None:
    """61 samples over 2 ranks, as Lightning's samplers share them with torch's loader
    (not in whole padded steps): ``validate`` pads one sample (31 + 31, as
    ``DistributedSampler`` does); ``predict`` repeats none (31 + 30), which our loader
    does with ``FastOptions(pad=False)`` (Lightning does not hand it a sampler)."""
    for stage, ours, counts in (
        ("validate", "ours", [31, 31]),
        ("predict", "ours_unpadded", [31, 30]),
    ):
        seen = {
            name: [read_ids(ddp_run / "eval" / f"{name}-{stage}-rank{r}.txt") for r in range(2)]
            for name in (ours, "torch")
        }
        assert [len(s) for s in seen[ours]] == [len(s) for s in seen["torch"]] == counts
        multiset = {name: Counter(i for s in ranks for i in s) for name, ranks in seen.items()}
        assert multiset[ours] == multiset["torch"], stage
