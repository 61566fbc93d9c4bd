"""From raw market data to a store: readers, normalization, synthetic data, bars and features.

The public modules are :mod:`ticktensor.ingest.synthetic` (deterministic synthetic
quotes and trades), :mod:`ticktensor.ingest.bars` (time, volume and dollar bars) and
:mod:`ticktensor.ingest.features` (point-in-time features, labels and training
stats); their main entry points are re-exported here.
"""

from __future__ import annotations

from .bars import dollar_bars, make_bars, time_bars, volume_bars
from .features import (
    DEMO_FEATURE_SPEC,
    FEATURES,
    FeatureArrays,
    FeatureStatsAccumulator,
    build_features,
    compute_features,
    default_spec,
    demo_feature_spec,
    dump_spec,
    known_features,
    load_spec,
)
from .synthetic import SyntheticMarket, generate_day, iter_days

__all__ = [
    "DEMO_FEATURE_SPEC",
    "FEATURES",
    "FeatureArrays",
    "FeatureStatsAccumulator",
    "SyntheticMarket",
    "build_features",
    "compute_features",
    "default_spec",
    "demo_feature_spec",
    "dollar_bars",
    "dump_spec",
    "generate_day",
    "iter_days",
    "known_features",
    "load_spec",
    "make_bars",
    "time_bars",
    "volume_bars",
]
