"""``ticktensor train``: train a small sequence model on a store, one process or under torchrun.

Single process:  ticktensor train --store STORE --out RUN
Data parallel:   torchrun --nproc-per-node=2 -m ticktensor.cli train --store STORE --out RUN
Rerunning with the same --out resumes from the latest good checkpoint (also with another
number of processes). Metrics go to RUN/metrics.jsonl, checkpoints to RUN/checkpoints/.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

__all__ = ["register"]

_HELP = {
    "store_version": "store version to pin (latest)",
    "batch_size": "global batch size, split over the data-parallel ranks",
    "checkpoint_every": "steps between checkpoints, besides one per epoch (0: epoch ends)",
    "eval_every": "steps between validation passes, besides one per epoch (0: epoch ends)",
    "max_steps": "stop after this many steps in total, with a checkpoint (0: no limit)",
    "tp": "tensor-parallel size: a (dp, tp) device mesh, data sharded over dp only",
    "sample_log": "log every rank's sample ids per step to RUN/samples-rank*.jsonl",
    "kill_at_step": "fault drill: SIGKILL --kill-rank after this step, first launch only",
    "threads": "window gather threads per rank (0: cores / local ranks)",
    "horizon_s": "label horizon in seconds, purged at the train/validation cut",
}


def register(sub: Any) -> None:
    from ticktensor.train.config import TrainConfig

    p = sub.add_parser(
        "train",
        help="train a model on a store (DDP under torchrun, resumable)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        helptext = _HELP.get(f.name, "")
        if f.name in ("store", "out"):
            p.add_argument(flag, required=True, help=f"{f.name} (path or URL)")
        elif isinstance(default, bool):
            p.add_argument(flag, action="store_true", help=helptext)
        elif f.name == "store_version":
            p.add_argument(flag, type=int, default=None, help=helptext)
        elif f.name in ("order", "backend"):
            choices = {"order": ["uniform", "block"], "backend": ["auto", "gloo", "nccl"]}
            p.add_argument(flag, choices=choices[f.name], default=default, help=helptext)
        else:
            kind = type(default)
            p.add_argument(flag, type=kind, default=default, help=f"{helptext} ({default})".strip())
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ticktensor.train import TrainConfig, train

    names = [f.name for f in dataclasses.fields(TrainConfig)]
    config = TrainConfig(**{n: getattr(args, n) for n in names})
    train(config)
    return 0
