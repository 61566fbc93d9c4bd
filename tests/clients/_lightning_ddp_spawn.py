"""Lightning's ``ddp_spawn`` on the CPU: the loader is pickled into two spawned processes.

Usage: ``python _lightning_ddp_spawn.py STORE OUT``. The loader is built in the main
process, before any process group exists, and ``Trainer.fit`` pickles it (with the model)
into each spawned rank, which must rebuild its threads and caches there and read its own
shard. Each rank writes the ids it trained on to ``OUT/epoch{E}-rank{R}.txt``. Run by
``test_lightning.py``.
"""

from __future__ import annotations

import sys
import warnings
from datetime import timedelta
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy

from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, WindowDataset
from ticktensor.store import open_store

WINDOW, BATCH, EPOCHS = 4, 8, 2


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


def main() -> None:
    url, out = sys.argv[1], Path(sys.argv[2])
    warnings.simplefilter("error")
    for expected in (
        ".*does not have many workers.*",  # Lightning's hint for torch loaders
        ".*ddp_spawn.*",  # Lightning recommends strategy="ddp" over ddp_spawn
        ".*GPU available but not used.*",
    ):
        warnings.filterwarnings("ignore", expected)
    dataset = WindowDataset(open_store(url), WINDOW)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, fast=FastOptions(seed=3))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(start_method="spawn", timeout=timedelta(seconds=60)),
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Recorder(out), train_dataloaders=loader)


if __name__ == "__main__":
    main()
