"""Ray Train: a 2-worker ``TorchTrainer`` on the CPU over a ticktensor loader.

Usage: ``python _ray_train.py STORE OUT``. Each worker builds the dataset from the store
URL, passes the loader through ``ray.train.torch.prepare_data_loader`` and trains three
epochs the way Ray's documentation shows (``loader.sampler.set_epoch(epoch)`` with more
than one worker); epoch 1 stops after ``STOP_AFTER`` batches (as a step limit does), so
epoch 2 comes in its own order only if ``set_epoch`` reached the loader (an abandoned
pass does not end an epoch). Each worker writes the ids it trained on, one per line, to
``OUT/epoch{E}-rank{R}.txt``, the warnings it saw to ``OUT/warnings-rank{R}.txt`` and
what ``set_epoch`` through the prepared loader raised, if anything, to
``OUT/set_epoch-rank{R}.txt`` (then it trains on, so that the shards are still checked).
Run by ``test_ray_train.py``.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

WINDOW, BATCH, EPOCHS, SEED = 4, 8, 3, 13
STOP_AFTER = {1: 2}  # epoch -> batches trained in it (all when absent)


def train_loop(config: dict[str, Any]) -> None:
    import ray.train
    import ray.train.torch
    import torch

    from ticktensor import DataLoader
    from ticktensor.loaders import FastOptions, WindowDataset
    from ticktensor.store import open_store

    out = Path(config["out"])
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    set_epoch_errors: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dataset = WindowDataset(open_store(config["store"]), WINDOW)
        loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, fast=FastOptions(seed=SEED))
        loader = ray.train.torch.prepare_data_loader(loader)
        model = ray.train.torch.prepare_model(torch.nn.Linear(WINDOW * 3, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(EPOCHS):
            if world_size > 1:
                try:
                    loader.sampler.set_epoch(epoch)
                except Exception as exc:  # reported to the test, which fails on it
                    set_epoch_errors.append(f"epoch {epoch}: {type(exc).__name__}: {exc}")
            seen: list[int] = []
            for step, (x, y) in enumerate(loader):
                if step == STOP_AFTER.get(epoch):
                    break
                seen += [int(v) for v in x[:, 0, 0].tolist()]
                loss = torch.nn.functional.mse_loss(model(x.flatten(1)), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            (out / f"epoch{epoch}-rank{rank}.txt").write_text("".join(f"{i}\n" for i in seen))
    lines = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught]
    (out / f"warnings-rank{rank}.txt").write_text("".join(f"{line}\n" for line in lines))
    (out / f"set_epoch-rank{rank}.txt").write_text("".join(f"{e}\n" for e in set_epoch_errors))


def main() -> None:
    import ray
    import ray.train
    from ray.train.torch import TorchTrainer

    url, out = sys.argv[1], Path(sys.argv[2])
    # A Ray of our own ("local"), never a cluster someone else started on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    try:
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={"store": url, "out": str(out)},
            scaling_config=ray.train.ScalingConfig(num_workers=2, use_gpu=False),
            run_config=ray.train.RunConfig(storage_path=str(out / "ray_results"), name="clients"),
        )
        trainer.fit()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
