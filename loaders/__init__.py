"""Store -> batches: window datasets, sample orders, time splits, sharding and resumable state."""

from .dataset import WindowDataset
from .samplers import (
    BlockShuffleOrder,
    CrossSectionalOrder,
    Order,
    SequentialOrder,
    UniformOrder,
    shuffle_quality,
)
from .sharding import EpochState, ShardPlan, rank_batches, world_from_env
from .splits import TimeSplit, time_splits, walk_forward

__all__ = [
    "BlockShuffleOrder",
    "CrossSectionalOrder",
    "EpochState",
    "Order",
    "SequentialOrder",
    "ShardPlan",
    "TimeSplit",
    "UniformOrder",
    "WindowDataset",
    "rank_batches",
    "shuffle_quality",
    "time_splits",
    "walk_forward",
    "world_from_env",
]
