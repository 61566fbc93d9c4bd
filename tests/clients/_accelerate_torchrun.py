"""accelerate under torchrun: 2 CPU processes (gloo) train a tiny model on their shards.

Usage: ``torchrun --standalone --nproc-per-node=2 _accelerate_torchrun.py STORE OUT``.
The loader is built before the ``Accelerator`` (the process group does not exist yet;
torchrun's ``RANK``/``WORLD_SIZE`` do) and goes through ``prepare()`` with the model.
Each rank writes the ids it trained on, one per line, to ``OUT/epoch{E}-rank{R}.txt``
(epochs 0 and 1, each started with ``loader.sampler.set_epoch(epoch)`` as torch's
``DistributedSampler`` users do); then the ids of the loader's own pass of epoch 2 to
``OUT/epoch2-rank{R}.txt``, and those of epoch 2 again (``loader.set_epoch(2)``) through
``accelerator.skip_first_batches(loader, 1)``, which ends the epoch, to
``OUT/skip1-rank{R}.txt``. What is wrong with the torch views
of the loader (``sampler``, ``len``, ``skip_first_batches``) goes to
``OUT/views-rank{R}.txt``, and the script carries on, so that the shards are checked
either way. Last, an evaluation over the 57 windows of symbols S0 and S1 (not a multiple
of 2 x 8: the last global step is short, and one sample is padding) gathers ids with
``accelerator.gather_for_metrics``; rank 0 writes them to ``OUT/gathered.txt``. Run by
``test_accelerate.py``.
"""

from __future__ import annotations

import gc
import sys
import warnings
from datetime import timedelta
from pathlib import Path

import torch
from accelerate import Accelerator, InitProcessGroupKwargs
from torch.utils.data.distributed import DistributedSampler

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
        cpu=True, kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=60))]
    )
    assert accelerator.num_processes == 2, accelerator.state
    model = torch.nn.Linear(WINDOW * 3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, prepared = accelerator.prepare(model, optimizer, loader)
    assert prepared is loader
    rank = accelerator.process_index
    problems = views(loader, rank)
    for epoch in range(EPOCHS):
        try:  # torch's DDP habit, kept by people who move to accelerate
            loader.sampler.set_epoch(epoch)
        except Exception as exc:  # reported to the test, which fails on it
            problems.append(f"sampler.set_epoch({epoch}): {type(exc).__name__}: {exc}")
        seen: list[int] = []
        for x, y in prepared:
            seen += ids(x)
            loss = torch.nn.functional.mse_loss(model(x.flatten(1)), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        write(out / f"epoch{epoch}-rank{rank}.txt", seen)
    write(out / f"epoch{EPOCHS}-rank{rank}.txt", [i for x, _ in loader for i in ids(x)])
    loader.set_epoch(EPOCHS)  # that epoch again, now without its first batch
    try:
        skipped = [i for x, _ in accelerator.skip_first_batches(loader, 1) for i in ids(x)]
    except Exception as exc:  # reported to the test, which fails on it
        problems.append(f"skip_first_batches: {type(exc).__name__}: {exc}")
        skipped = []
    if loader.epoch != EPOCHS + 1:
        problems.append(f"after skip_first_batches: epoch {loader.epoch}, not {EPOCHS + 1}")
    write(out / f"skip1-rank{rank}.txt", skipped)
    (out / f"views-rank{rank}.txt").write_text("".join(f"{p}\n" for p in problems))
    evaluation = WindowDataset(open_store(url), WINDOW, symbols=["S0", "S1"])
    gathered: list[int] = []
    for x, _ in accelerator.prepare(DataLoader(evaluation, batch_size=BATCH)):
        gathered += [int(v) for v in accelerator.gather_for_metrics(x[:, 0, 0]).tolist()]
    if accelerator.is_main_process:
        write(out / "gathered.txt", gathered)
    accelerator.end_training()


def shut_down() -> None:
    """Drop what holds the process group and destroy it while the interpreter is alive:
    a gloo thread that frees a collective's tensors during interpreter shutdown aborts
    the rank ("terminate called without an active exception")."""
    gc.collect()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def views(loader: DataLoader, rank: int) -> list[str]:
    """What is wrong with torch's view of the loader on this rank (nothing, we hope)."""
    problems = []
    if len(loader) != 4:  # 64 samples, 8 per batch, 2 ranks
        problems.append(f"len(loader) = {len(loader)}, expected 4")
    try:
        sampler = loader.sampler
    except AttributeError as exc:
        return [*problems, f"sampler: AttributeError: {exc}"]
    if not isinstance(sampler, DistributedSampler):
        problems.append(f"sampler is a {type(sampler).__name__}, not a DistributedSampler")
    elif (sampler.rank, sampler.num_replicas) != (rank, 2):
        problems.append(f"sampler: rank {sampler.rank} of {sampler.num_replicas}")
    return problems


def ids(x: torch.Tensor) -> list[int]:
    return [int(v) for v in x[:, 0, 0].tolist()]


def write(path: Path, values: list[int]) -> None:
    path.write_text("".join(f"{i}\n" for i in values))


if __name__ == "__main__":
    try:
        main()
    finally:
        shut_down()
