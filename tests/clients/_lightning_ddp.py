"""Lightning DDP on the CPU (2 processes, gloo) over a ticktensor loader.

Usage: ``python _lightning_ddp.py STORE OUT``. Lightning starts rank 1 by running this
script again. Four fits, one after the other in the same processes:

- ``datamodule``: the loader is built in ``LightningDataModule.train_dataloader()``;
- ``before_fit``: the loader is built first thing in the script (before Lightning has
  set any environment variable or process group) and passed to ``fit``; a checkpoint
  is saved after batch ``RESUME_AFTER`` of epoch 1 (rank 0 writes it, with rank 0's
  loader state);
- ``resumed``: a new loader and model continue from that checkpoint;
- ``limited``: another loader built first thing, with ``limit_train_batches=2``: each
  epoch's pass is abandoned after 2 batches, so epoch 1 has its own order only if
  Lightning's ``loader.sampler.set_epoch(1)`` reached the loader.

Each rank writes the ids it trained on, one per line, to
``OUT/{MODE}/epoch{E}-rank{R}.txt``. Then ``validate`` and ``predict`` over the first
``EVAL_SAMPLES`` windows (two ranks share them evenly, but not in whole global steps of
``2 * BATCH``), with our loader and with torch's, both built first thing (Lightning gives
torch's a ``DistributedSampler``): each rank writes the ids it saw to
``OUT/eval/{ours,ours_unpadded,torch}-{validate,predict}-rank{R}.txt``.
Run by ``test_lightning.py``.
"""

from __future__ import annotations

import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import Subset

from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, WindowDataset
from ticktensor.store import open_store

WINDOW, BATCH, EPOCHS = 4, 8, 2
EVAL_SAMPLES = 61
RESUME_AFTER = 1  # batch index in epoch 1 after which the checkpoint is saved


def loader(url: str) -> DataLoader:
    dataset = WindowDataset(open_store(url), WINDOW)
    return DataLoader(dataset, batch_size=BATCH, shuffle=True, fast=FastOptions(seed=3))


class Recorder(pl.LightningModule):
    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = out
        self.layer = torch.nn.Linear(WINDOW * 3, 1)
        self.seen: list[int] = []

    def on_train_epoch_start(self) -> None:
        self.seen = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        self.seen += [int(v) for v in x[:, 0, 0].tolist()]
        return torch.nn.functional.mse_loss(self.layer(x.flatten(1)), y)

    def on_train_epoch_end(self) -> None:
        name = f"epoch{self.current_epoch}-rank{self.global_rank}.txt"
        (self.out / name).write_text("".join(f"{i}\n" for i in self.seen))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Evaluator(pl.LightningModule):
    """Records the ids it validates on; predicts the ids of each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(WINDOW * 3, 1)
        self.seen: list[int] = []

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        self.seen += [int(v) for v in batch[0][:, 0, 0].tolist()]

    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> list[int]:
        return [int(v) for v in batch[0][:, 0, 0].tolist()]


class SaveAt(pl.Callback):
    """Save a checkpoint after batch ``RESUME_AFTER`` of epoch 1 (every rank calls it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(self, trainer: pl.Trainer, *_: object) -> None:
        if trainer.current_epoch == 1 and trainer.fit_loop.batch_idx == RESUME_AFTER:
            trainer.save_checkpoint(self.path)


class Windows(pl.LightningDataModule):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def train_dataloader(self) -> DataLoader:
        return loader(self.url)


def main() -> None:
    warnings.simplefilter("error")
    # Lightning's advice for a loader without worker processes: ours has none by design.
    warnings.filterwarnings("ignore", "The 'train_dataloader' does not have many workers")
    # Lightning 2.6 flattens loaders with a torch pytree API that torch 2.13 deprecates.
    warnings.filterwarnings(
        "ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning
    )
    # Lightning's notice when a checkpoint was taken mid-epoch; the loader's state is exact.
    warnings.filterwarnings(
        "ignore", "You're resuming from a checkpoint that ended before the epoch ended"
    )
    # Lightning's notice that DDP evaluation repeats samples to even the ranks: what is
    # compared here.
    warnings.filterwarnings("ignore", "Using `DistributedSampler` with the dataloaders")
    url, out = sys.argv[1], Path(sys.argv[2])
    early, early_limited = loader(url), loader(url)
    evaluated = Subset(WindowDataset(open_store(url), WINDOW), range(EVAL_SAMPLES))
    eval_loaders = {
        "ours": DataLoader(evaluated, batch_size=BATCH),
        # Lightning's predict shares samples without repeats; pad=False does the same.
        "ours_unpadded": DataLoader(evaluated, batch_size=BATCH, fast=FastOptions(pad=False)),
        "torch": torch.utils.data.DataLoader(evaluated, batch_size=BATCH),
    }
    fit(Recorder(out / "datamodule"), datamodule=Windows(url))
    ckpt = out / "mid.ckpt"
    fit(Recorder(out / "before_fit"), [SaveAt(ckpt)], train_dataloaders=early)
    if ckpt.exists():  # else epoch 1 never reached that batch: the test says so
        fit(Recorder(out / "resumed"), train_dataloaders=loader(url), ckpt_path=str(ckpt))
    fit(Recorder(out / "limited"), train_dataloaders=early_limited, limit_train_batches=2)
    evaluate(eval_loaders, out / "eval")


def evaluate(loaders: dict[str, Any], out: Path) -> None:
    out.mkdir(exist_ok=True)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=60)),
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
    )
    for name, loader in loaders.items():
        model = Evaluator()
        trainer.validate(model, loader, verbose=False)
        rank = trainer.global_rank
        write(out / f"{name}-validate-rank{rank}.txt", model.seen)
        predictions = trainer.predict(model, loader) or []
        write(out / f"{name}-predict-rank{rank}.txt", [i for p in predictions for i in p])


def write(path: Path, seen: list[int]) -> None:
    path.write_text("".join(f"{i}\n" for i in seen))


def fit(
    model: Recorder,
    callbacks: list[pl.Callback] | None = None,
    limit_train_batches: int | None = None,
    **data: object,
) -> None:
    model.out.mkdir(exist_ok=True)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        # A short timeout: ranks given unequal work fail here instead of hanging.
        strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=60)),
        max_epochs=EPOCHS,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        log_every_n_steps=1,
        callbacks=callbacks,
        limit_train_batches=limit_train_batches,
    )
    trainer.fit(model, **data)


if __name__ == "__main__":
    main()
