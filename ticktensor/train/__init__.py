"""Training on a store: DDP under torchrun, atomic checkpoints, exact resume after faults.

``ticktensor train`` (or :func:`train`) trains a small causal conv net on a store's
windows, one data shard per data-parallel rank; see ``docs/training.md``. Names are
imported lazily, so the command line can read :class:`TrainConfig` without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .config import TrainConfig

if TYPE_CHECKING:
    from .checkpoint import Checkpoints, StoreIdentity
    from .curves import CurvePoint, loss_curve, time_to_target
    from .distributed import Distributed
    from .jsonlines import JsonLines, read_jsonlines
    from .model import WindowConvNet
    from .rng import get_rng_state, set_rng_state
    from .samples import SampleLog
    from .trainer import train

__all__ = [
    "Checkpoints",
    "CurvePoint",
    "Distributed",
    "JsonLines",
    "SampleLog",
    "StoreIdentity",
    "TrainConfig",
    "WindowConvNet",
    "get_rng_state",
    "loss_curve",
    "read_jsonlines",
    "set_rng_state",
    "time_to_target",
    "train",
]

_LAZY = {
    "Checkpoints": "checkpoint",
    "CurvePoint": "curves",
    "Distributed": "distributed",
    "JsonLines": "jsonlines",
    "SampleLog": "samples",
    "StoreIdentity": "checkpoint",
    "WindowConvNet": "model",
    "get_rng_state": "rng",
    "loss_curve": "curves",
    "read_jsonlines": "jsonlines",
    "set_rng_state": "rng",
    "time_to_target": "curves",
    "train": "trainer",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
