"""accelerate under torchrun: 2 CPU processes (gloo) train a tiny model on their shards.

Usage: ``torchrun --standalone --nproc-per-node=2 _accelerate_torchrun.py STORE OUT``.
The loader is built before the ``Accelerator`` (the process group does not exist yet;
torchrun's ``RANK``/``WORLD_SIZE`` do) and goes through ``prepare()`` with the model.
Each rank writes the ids it trained on, one per line, to ``OUT/epoch{E}-rank{R}.txt``.
Run by ``test_accelerate.py``.
"""

from __future__ import annotations

import sys
import warnings
from datetime import timedelta
from pathlib import Path

import torch
from accelerate import Accelerator, InitProcessGroupKwargs

from ticktensor import DataLoader
from ticktensor.loaders import FastOptions, WindowDataset
from ticktensor.store import open_store

WINDOW, BATCH, EPOCHS = 4, 8, 2


def main() -> None:
    warnings.simplefilter("error")
    url, out = sys.argv[1], Path(sys.argv[2])
    dataset = WindowDataset(open_store(url), WINDOW)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, fast=FastOptions(seed=11))
    # A short timeout: ranks given unequal work fail here instead of hanging.
    accelerator = Accelerator(
        cpu=True, kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=30))]
    )
    assert accelerator.num_processes == 2, accelerator.state
    model = torch.nn.Linear(WINDOW * 3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    assert prepared is loader
    for epoch in range(EPOCHS):
        seen: list[int] = []
        for x, y in prepared:
            seen += [int(v) for v in x[:, 0, 0].tolist()]
            loss = torch.nn.functional.mse_loss(model(x.flatten(1)), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        name = f"epoch{epoch}-rank{accelerator.process_index}.txt"
        (out / name).write_text("".join(f"{i}\n" for i in seen))
    accelerator.end_training()


if __name__ == "__main__":
    main()
