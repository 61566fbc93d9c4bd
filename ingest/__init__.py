"""From raw market data to a store: readers, normalization, synthetic data and features.

The public modules are :mod:`ticktensor.ingest.synthetic` (deterministic synthetic
quotes and trades) and :mod:`ticktensor.ingest.features` (a point-in-time feature
builder); their main entry points are re-exported here.
"""

from __future__ import annotations

from .features import (
    DEMO_FEATURE_SPEC,
    FEATURES,
    FeatureArrays,
    build_features,
    demo_feature_spec,
)
from .synthetic import SyntheticMarket, generate_day, iter_days

__all__ = [
    "DEMO_FEATURE_SPEC",
    "FEATURES",
    "FeatureArrays",
    "SyntheticMarket",
    "build_features",
    "demo_feature_spec",
    "generate_day",
    "iter_days",
]
