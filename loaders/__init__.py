"""Store -> batches: window datasets, sample orders, time splits, sharding and resumable state."""

from ._resident import ResidentOptions
from .dali import DaliOptions
from .dataloader import DataLoader
from .dataset import WindowDataset
from .options import FastOptions
from .samplers import (
    BlockShuffleOrder,
    CrossSectionalOrder,
    Order,
    SequentialOrder,
    UniformOrder,
    shuffle_quality,
)
from .sharding import EpochState, ShardPlan, data_parallel_world, rank_batches, world_from_env
from .splits import TimeSplit, time_splits, walk_forward

__all__ = [
    "BlockShuffleOrder",
    "CrossSectionalOrder",
    "DaliOptions",
    "DataLoader",
    "EpochState",
    "FastOptions",
    "Order",
    "ResidentOptions",
    "SequentialOrder",
    "ShardPlan",
    "TimeSplit",
    "UniformOrder",
    "WindowDataset",
    "data_parallel_world",
    "rank_batches",
    "shuffle_quality",
    "time_splits",
    "walk_forward",
    "world_from_env",
]
