"""Lightning ``validate`` and ``predict`` under DDP (2 CPU processes, gloo), ours and torch's.

Usage: ``python _lightning_ddp_eval.py STORE OUT``. Lightning starts rank 1 by running this
script again. The dataset is the first ``SAMPLES`` windows of the store: two ranks share
them evenly, but not in whole global steps of ``2 * BATCH``. Both loaders are built first
thing (before Lightning has set any environment variable or process group); Lightning
gives torch's a ``DistributedSampler``. Each rank writes the ids it saw to
``OUT/{ours,torch}-{validate,predict}-rank{R}.txt``. Run by ``test_lightning.py``.
"""

from __future__ import annotations

import sys
import warnings
from datetime import timedelta
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import Subset

from ticktensor import DataLoader
from ticktensor.loaders import WindowDataset
from ticktensor.store import open_store

WINDOW, BATCH, SAMPLES = 4, 8, 62


class Evaluator(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(WINDOW * 3, 1)
        self.seen: list[int] = []

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        self.seen += [int(v) for v in batch[0][:, 0, 0].tolist()]

    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> list[int]:
        return [int(v) for v in batch[0][:, 0, 0].tolist()]


def write(path: Path, seen: list[int]) -> None:
    path.write_text("".join(f"{i}\n" for i in seen))


def main() -> None:
    warnings.simplefilter("error")
    # Lightning's advice for a loader without worker processes: ours has none by design.
    warnings.filterwarnings("ignore", "The '.*_dataloader' does not have many workers")
    # Lightning 2.6 flattens loaders with a torch pytree API that torch 2.13 deprecates.
    warnings.filterwarnings(
        "ignore", r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning
    )
    # Lightning's notice that DDP evaluation repeats samples to even the ranks: what is
    # compared here.
    warnings.filterwarnings("ignore", "Using `DistributedSampler` with the dataloaders")
    url, out = sys.argv[1], Path(sys.argv[2])
    dataset = Subset(WindowDataset(open_store(url), WINDOW), range(SAMPLES))
    loaders = {
        "ours": DataLoader(dataset, batch_size=BATCH),
        "torch": torch.utils.data.DataLoader(dataset, batch_size=BATCH),
    }
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
        predictions = trainer.predict(model, loader)
        assert predictions is not None
        write(out / f"{name}-predict-rank{rank}.txt", [i for p in predictions for i in p])  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
