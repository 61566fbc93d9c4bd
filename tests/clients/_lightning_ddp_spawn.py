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
from _lightning_ddp import EPOCHS, Recorder, loader  # the DDP script's model and loader
from lightning.pytorch.strategies import DDPStrategy


def main() -> None:
    url, out = sys.argv[1], Path(sys.argv[2])
    warnings.simplefilter("error")
    for expected in (
        ".*does not have many workers.*",  # Lightning's hint for torch loaders
        ".*ddp_spawn.*",  # Lightning recommends strategy="ddp" over ddp_spawn
        ".*GPU available but not used.*",
    ):
        warnings.filterwarnings("ignore", expected)
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
    trainer.fit(Recorder(out), train_dataloaders=loader(url))  # built before any process group


if __name__ == "__main__":
    main()
