"""Data-parallel training on a ticktensor store from Python, as ``ticktensor train`` does.

    torchrun --nproc-per-node=2 examples/train_ddp.py build/demo-store build/runs/ddp

Ranks and the rendezvous come from torchrun's environment; alone (``python
examples/train_ddp.py STORE RUN``) it trains in one process. Rerun it with the same RUN
folder to resume from the latest checkpoint, with any number of processes.
"""

from __future__ import annotations

import os
import sys

from ticktensor.train import TrainConfig, train


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    store, out = argv
    config = TrainConfig(
        store=store,
        out=out,
        window=64,
        batch_size=512,  # global: split over the data-parallel ranks
        epochs=3,
        checkpoint_every=200,
        eval_every=200,
    )
    summary = train(config)
    if summary["epochs"] and os.environ.get("RANK", "0") == "0":
        last = summary["epochs"][-1]
        print(f"done: {summary['step']} steps, valid loss {last['valid_loss']:.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
